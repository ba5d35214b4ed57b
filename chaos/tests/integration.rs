//! The harness's integration tests, as one test binary.
//!
//! Each module below was its own test binary; one binary links the harness
//! once instead of twenty-two times and runs every test in one pool, so a
//! long campaign test no longer leaves a core idle while its binary's last
//! test finishes. Run one file's tests by its module path:
//! `cargo test -p agentchaos --test integration faults::`.
//!
//! `support` (finding the workspace's binaries), `campaign` (`agentchaos
//! run` as the campaign tests drive it), `python` (the Python kit on
//! `PYTHONPATH`) and `node` (the Node kit) are shared by the modules.

#[path = "support/campaign.rs"]
mod campaign;
#[path = "support/node.rs"]
mod node;
#[path = "support/python.rs"]
mod python;
mod support;

mod adapter_client;
mod adapter_run;
mod adk_adapter;
mod builtin_scenarios;
mod cli;
mod concurrency;
mod conformance;
mod coverage;
mod differential;
mod docs;
mod earned_verdicts;
mod exit_codes;
mod faults;
mod fork_server;
mod html_report;
mod langchain_file_adapter;
mod langgraph_adapter;
mod langgraphjs_adapter;
mod layout;
mod leases;
mod mutants;
mod node_kit;
mod node_package;
mod openai_agents_adapter;
mod postgres;
mod powerloss_campaign;
mod powerloss_states;
mod python_kit;
mod python_wheel;
mod random;
mod report_schema;
mod signals;
mod strands_adapter;
mod syscall_filter;
mod syscall_record;
mod syscall_run;
mod syscall_trace;
mod timings;
mod workers;
