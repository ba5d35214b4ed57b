//! Campaigns: running trials and judging them (Jepsen's test runner).
//!
//! [`trial`] runs one scenario under one nemesis plan and records its
//! history; [`runner`] schedules every trial of a campaign over a worker
//! pool; [`powercampaign`] recovers every crash state a power loss allows,
//! at the crash points [`powersites`] chooses; [`probe`] probes a finished
//! store (damage, double commits, the writer lock); [`shrink`] minimizes a
//! failing random scenario; [`replay`] re-runs one trial from its replay
//! command; [`interleavings`] names the parallel appenders' schedules;
//! [`dbcrash`] crashes the database
//! server under a database-backed store; [`workers`] runs many worker
//! processes on one store's sessions, pausing, killing and cutting off
//! lease holders and crashing the database under them. Nothing here
//! formats a report.

pub mod config;
pub mod dbcrash;
pub mod describe;
pub mod execute;
pub mod interleavings;
pub mod pool;
pub mod powercampaign;
pub mod powersites;
pub mod prepare;
pub mod probe;
pub mod replay;
pub mod runner;
pub mod scratch;
pub mod shrink;
pub mod trial;
pub mod workers;
