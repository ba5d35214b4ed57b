//! agentchaos: kills real child agents at every crash point of a session
//! store and checks the recovery invariants. Linux only (Unix sockets,
//! SIGKILL, /dev/shm; the syscall tracer also needs x86_64).
//!
//! Jepsen's split, one module per concept:
//! - generator: [`scenario`] (the declarative script) and [`generate`] (random scenarios);
//! - client: [`agent`] (the child process) with its [`tools`], the [`world`]
//!   its remote effects land in, and the [`store`] under test ([`adapter`]:
//!   stores in any language, over the adapter protocol);
//! - nemesis: [`nemesis`] (kill, tear, power cut, timer, double crash),
//!   [`syscall`] (ptrace: kills, tears and errors at file-mutating syscalls),
//!   [`powerloss`] (crash states a power loss allows), [`powercampaign`]
//!   (recovering every such state through the store's adapter);
//! - history: [`trial`] (one trial's processes and observations) and [`wire`]
//!   (what the child reports as it happens);
//! - checker: [`checker`] (the invariants) over [`model`] (the harness's own
//!   reading of a log) and [`oracle`] (what a store must serve, from the model);
//! - [`probe`] (damage and double-commit probes on a finished store);
//! - [`runner`] (campaigns), [`replay`], [`shrink`], [`report`] with its
//!   [`scorecard`] (a verdict per capability), [`rng`].

pub mod adapter;
pub mod agent;
pub mod checker;
pub mod generate;
pub mod model;
pub mod nemesis;
pub mod oracle;
pub mod powercampaign;
pub mod powerloss;
pub mod probe;
pub mod replay;
pub mod report;
pub mod rng;
pub mod runner;
pub mod scenario;
pub mod scorecard;
pub mod shrink;
pub mod store;
pub mod syscall;
pub mod tools;
pub mod trial;
pub mod wire;
pub mod world;
