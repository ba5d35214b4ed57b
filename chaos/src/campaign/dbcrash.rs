//! The database-crash campaign (`agentchaos db-crash`): a store whose
//! events live in PostgreSQL, driven through its adapter against a
//! private cluster this campaign starts; the server is crashed right after
//! the store acknowledged the k-th append of a short agent session, then
//! restarted, and a fresh adapter process must serve every acknowledged
//! event at its seq (`acked-durable`).
//!
//! The adapter gets the cluster's DSN in `AGENTSTORE_PG_DSN` (a `--dsn`
//! in the adapter command would point it elsewhere; the campaign never
//! does). One trial per crash model ([`DatabaseCrash`]) and k; each trial
//! has its own store root, so trials share the server, never a session.
//! This module runs trials and collects violations; the invariant is
//! [`crate::check::acked_survived_database_crash`], the crash models
//! [`crate::nemesis::database`].

use std::path::Path;

use agentchaos_protocol::event::{Effect, Event, ResultStatus, RunStatus, Seq};
use agentchaos_protocol::message::OpenArgs;
use agentstore_pg::cluster::{Cluster, ClusterOptions};

use crate::check::{self, Violation};
use crate::nemesis::database::DatabaseCrash;
use crate::store::adapter::{AdapterCommand, Client, ClientOptions};

/// The environment variable the adapter finds the database in.
pub const DSN_VAR: &str = "AGENTSTORE_PG_DSN";

/// The session every trial writes: one run calling a side-effecting tool
/// (intent, commit, result), so a crash lands after every kind of append.
pub fn session_events() -> Vec<Event> {
    vec![
        Event::RunStarted {
            run_id: "r1".into(),
        },
        Event::UserMessage {
            parent: None,
            text: "deploy v2 to prod".into(),
        },
        Event::ToolCall {
            parent: Some("e2".into()),
            call_id: "c1".into(),
            tool: "deploy".into(),
            args: serde_json::json!({"version": "v2"}),
            effect: Effect::SideEffect,
            operation_id: Some("op-c1".into()),
            target: Some("prod".into()),
            needs_approval: false,
        },
        Event::ToolStarted {
            call_id: "c1".into(),
        },
        Event::EffectCommitted {
            call_id: "c1".into(),
            operation_id: "op-c1".into(),
            external_ref: "deploy-7731".into(),
        },
        Event::ToolResult {
            parent: Some("e3".into()),
            call_id: "c1".into(),
            status: ResultStatus::Ok,
            output: Some(serde_json::json!("deployed v2")),
            blob: None,
        },
        Event::AssistantMessage {
            parent: Some("e6".into()),
            text: "v2 is deployed to prod".into(),
        },
        Event::RunFinished {
            run_id: "r1".into(),
            status: RunStatus::Completed,
        },
    ]
}

/// One trial: crash `crash` right after the `after`-th acknowledged append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trial {
    pub crash: DatabaseCrash,
    pub after: usize,
}

impl Trial {
    /// The one-line command that runs this trial again.
    pub fn replay(&self, adapter: &AdapterCommand) -> String {
        format!(
            "agentchaos db-crash --adapter {} --crash {} --after {}",
            crate::shell::word(&adapter.to_string()),
            self.crash,
            self.after
        )
    }
}

/// What one trial found.
#[derive(Debug, Clone)]
pub struct TrialOutcome {
    pub trial: Trial,
    pub acked: usize,
    pub violations: Vec<Violation>,
}

/// Why a campaign could not run (as opposed to a store failing it).
#[derive(Debug, thiserror::Error)]
pub enum DbCrashError {
    #[error("{0}")]
    Cluster(#[from] agentstore_pg::cluster::ClusterError),
    #[error("{what}: {source}")]
    Adapter {
        what: String,
        #[source]
        source: crate::store::adapter::ClientError,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// SIGINT or SIGTERM arrived: the server is not restarted again.
    #[error("{}", crate::child::INTERRUPTED)]
    Interrupted,
}

fn adapter_err(what: &str) -> impl FnOnce(crate::store::adapter::ClientError) -> DbCrashError + '_ {
    move |source| DbCrashError::Adapter {
        what: what.to_string(),
        source,
    }
}

fn spawn(adapter: &AdapterCommand, cluster: &Cluster) -> Result<Client, DbCrashError> {
    let mut cmd = adapter.to_command();
    cmd.env(DSN_VAR, cluster.dsn());
    Client::spawn(cmd, ClientOptions::default()).map_err(adapter_err("start the adapter"))
}

/// Runs every trial of `trials` on one private cluster.
pub fn run(adapter: &AdapterCommand, trials: &[Trial]) -> Result<Vec<TrialOutcome>, DbCrashError> {
    let mut cluster = Cluster::start(ClusterOptions::default())?;
    let scratch = tempfile::tempdir().map_err(|source| DbCrashError::Io {
        what: "create a scratch directory".into(),
        source,
    })?;
    trials
        .iter()
        .enumerate()
        .map(|(i, t)| {
            run_trial(
                adapter,
                &mut cluster,
                &scratch.path().join(format!("t{i}")),
                *t,
            )
        })
        .collect()
}

fn run_trial(
    adapter: &AdapterCommand,
    cluster: &mut Cluster,
    dir: &Path,
    trial: Trial,
) -> Result<TrialOutcome, DbCrashError> {
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace).map_err(|source| DbCrashError::Io {
        what: format!("create {}", workspace.display()),
        source,
    })?;
    let open = |create| OpenArgs {
        root: dir.join("root"),
        session: "db-crash".into(),
        workspace: Some(workspace.clone()),
        create,
        lease: None,
    };
    let mut client = spawn(adapter, cluster)?;
    client
        .open(&open(true))
        .map_err(adapter_err("open with create"))?;
    trial.crash.prepare(cluster)?;
    let mut acked: Vec<(Seq, Event)> = Vec::new();
    for event in session_events().into_iter().take(trial.after) {
        let seq = match &event {
            Event::ToolStarted { call_id } => client.start_tool(call_id).map(|a| a.seq),
            e => client.append(e).map(|a| a.seq),
        }
        .map_err(adapter_err("append before the crash"))?;
        acked.push((seq, event));
    }
    trial.crash.apply(cluster)?;
    let _ = client.kill();
    if agentstore::interrupt::requested() {
        return Err(DbCrashError::Interrupted);
    }
    cluster.restart()?;
    let mut fresh = spawn(adapter, cluster)?;
    let when = format!(
        "after {} right after the store acknowledged append {} of the session, and a restart",
        trial.crash.describe(),
        trial.after
    );
    let served = match fresh.open(&open(false)) {
        Ok(_) => Some(fresh.events(None).map_err(adapter_err("read events"))?),
        Err(e) if e.refusal_kind() == Some(agentchaos_protocol::ErrorKind::NotFound) => None,
        Err(e) => return Err(adapter_err("open after the restart")(e)),
    };
    let _ = fresh.shutdown();
    Ok(TrialOutcome {
        trial,
        acked: acked.len(),
        violations: check::acked_survived_database_crash(&acked, served.as_deref(), &when),
    })
}
