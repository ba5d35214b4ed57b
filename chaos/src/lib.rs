//! agentchaos: kills real child agents at every crash point of a session
//! store and checks the recovery invariants. Linux only (Unix sockets,
//! SIGKILL, /dev/shm; the syscall tracer also needs x86_64).
//!
//! The folders follow Jepsen's split of roles:
//! - [`scenario`]: the generator (the declarative script, random scenarios,
//!   the deterministic RNG);
//! - [`agent`]: the client process the nemesis kills, with its tools, the
//!   world its remote effects land in, and the wire it reports on;
//! - [`store`]: the store under test behind one seam, in-process or over
//!   the adapter protocol (stores in any language);
//! - [`nemesis`]: what kills or breaks (crash points, the syscall nemesis,
//!   power loss);
//! - [`history`]: what a trial observed, life by life;
//! - [`model`]: the harness's own reading of a log and the oracle of what
//!   a store must serve (the truth the checker compares with);
//! - [`check`]: the invariants, and the evidence a trial earned;
//! - [`campaign`]: trials, the runner, probes, shrinking,
//!   replay;
//! - [`timeline`]: a failing trial life by life, the model the HTML
//!   report draws;
//! - [`report`]: text, JSON, JUnit, HTML and the scorecard;
//! - [`shell`]: quoting the commands a report prints;
//! - [`child`]: child processes that die with the harness;
//! - [`timing`]: where a trial's time goes (`--timings`);
//! - [`bounded`]: reading a file a user or a store wrote, within a limit.

pub mod agent;
pub mod bounded;
pub mod campaign;
pub mod check;
pub mod child;
pub mod coverage;
pub mod history;
pub mod model;
pub mod nemesis;
pub mod report;
pub mod scenario;
pub mod shell;
pub mod store;
pub mod timeline;
pub mod timing;
