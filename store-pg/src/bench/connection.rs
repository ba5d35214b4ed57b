//! The connection section of `agentstore-pg bench`: an owner's append,
//! a fenced write and a takeover under each [`ConnectionState`] (a live
//! connection, one the server ended, and the relay's faults on the wire).
//! It owns the relay it starts and the sessions it creates under the
//! run's root; it never ends a connection that is not its own writers'.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::relay::{Relay, WireFault};
use super::{
    client, dying_run, io, lease, median, message_of_json_size, ms, BenchError, Env,
    CONNECTION_ROUNDS, EVENT_JSON_BYTES, RETRY,
};
use crate::cluster::Cluster;
use crate::{PgStore, StoreError};

/// How long the relay holds each read from the server in the `delayed`
/// connection state.
pub const WIRE_DELAY: Duration = Duration::from_millis(1);

/// The state of a writer's connection right before its write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectionState {
    Alive,
    /// The server ended it (`pg_terminate_backend`): the write finds it
    /// dead, connects again and runs once more.
    EndedByServer,
    /// Every read from the server held [`WIRE_DELAY`] by the relay.
    Delayed,
    /// The relay closes the connection right before the write's `COMMIT`:
    /// the server rolls it back; the store reconnects, asks the server
    /// what became of it and runs it again.
    ResetBeforeCommit,
    /// The relay forwards the `COMMIT` and loses its answer: it committed;
    /// the store reconnects and asks the server, which says so.
    CommitAnswerLost,
}

impl ConnectionState {
    pub const ALL: [ConnectionState; 5] = [
        ConnectionState::Alive,
        ConnectionState::EndedByServer,
        ConnectionState::Delayed,
        ConnectionState::ResetBeforeCommit,
        ConnectionState::CommitAnswerLost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ConnectionState::Alive => "alive",
            ConnectionState::EndedByServer => "ended by server",
            ConnectionState::Delayed => "delayed 1 ms",
            ConnectionState::ResetBeforeCommit => "reset at COMMIT",
            ConnectionState::CommitAnswerLost => "COMMIT answer lost",
        }
    }

    /// What the relay puts on the wire in this state (None: no relay needed).
    fn wire(self) -> Option<WireFault> {
        match self {
            ConnectionState::Alive | ConnectionState::EndedByServer => None,
            ConnectionState::Delayed => Some(WireFault::Delay(WIRE_DELAY)),
            ConnectionState::ResetBeforeCommit => Some(WireFault::ResetBeforeCommit),
            ConnectionState::CommitAnswerLost => Some(WireFault::LoseCommitAnswer),
        }
    }

    /// Whether the fault lands on a fenced write: one refused before it
    /// sends a `COMMIT` escapes a fault at the `COMMIT`.
    fn reaches_fenced(self) -> bool {
        !matches!(
            self,
            ConnectionState::ResetBeforeCommit | ConnectionState::CommitAnswerLost
        )
    }

    /// Whether the fault lands on a takeover: a takeover opens a
    /// connection of its own, so there is none for the server to end
    /// before it.
    fn reaches_takeover(self) -> bool {
        self != ConnectionState::EndedByServer
    }
}

/// Median and worst of one kind of write, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Timing {
    pub p50_ms: f64,
    pub max_ms: f64,
}

impl Timing {
    fn of(values: Vec<f64>) -> Timing {
        Timing {
            max_ms: values.iter().copied().fold(0.0, f64::max),
            p50_ms: median(values),
        }
    }
}

/// One connection state of the connection section; None where the
/// state's fault cannot land on that write.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectionRow {
    pub connection: ConnectionState,
    /// The owner's append, acknowledged.
    pub append: Timing,
    /// A taken-over owner's append, refused `fenced`.
    pub fenced: Option<Timing>,
    /// A takeover: open with the lease and recovery, then the first
    /// acknowledged append.
    pub takeover: Option<Timing>,
}

/// The connection section.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectionSection {
    pub rounds: usize,
    pub rows: Vec<ConnectionRow>,
}

/// `dsn` with `application_name` set, so the section can end exactly
/// its own writers' connections (and never another client's, on a server
/// given by `--dsn`).
fn named_dsn(dsn: &str, name: &str) -> String {
    if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        let sep = if dsn.contains('?') { '&' } else { '?' };
        format!("{dsn}{sep}application_name={name}")
    } else {
        format!("{dsn} application_name={name}")
    }
}

/// Ends every backend of `name`'s connections and waits until the server
/// shows none: the next write finds its connection dead.
fn end_connections(admin: &mut postgres::Client, name: &str) -> Result<(), BenchError> {
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .map_err(StoreError::pg("end the writer's connection"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&name],
            )
            .map_err(StoreError::pg("look for the writer's backend"))?
            .get(0);
        if left == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Connection(format!(
                "the server still shows {left} backend(s) of {name} 30 s after pg_terminate_backend"
            )));
        }
        std::thread::sleep(RETRY);
    }
}

/// The connection section: an owner and a taken-over owner (fenced by an
/// heir that took its session over) write, and a new owner takes over a
/// lapsed session, each on its own named connection, under each
/// [`ConnectionState`]. On a private cluster every writer connects
/// through the relay, in every state, so that the states differ only by
/// their fault; on a given server there is no relay, and only the live
/// and server-ended states are measured.
pub(super) fn connection_faults(
    env: &Env,
    cluster: Option<&Cluster>,
) -> Result<ConnectionSection, BenchError> {
    let relay = match cluster {
        Some(c) => {
            let port = c.port();
            let dir = c.socket_dir().join("relay");
            let upstream = c.socket_dir().join(format!(".s.PGSQL.{port}"));
            let relay = Relay::start(&dir, port, upstream)
                .map_err(io(format!("start the relay in {}", dir.display())))?;
            let host = format!("host={}", c.socket_dir().display());
            if !env.dsn.contains(&host) {
                // Writers that bypass the relay would measure no fault.
                return Err(BenchError::Connection(format!(
                    "the private cluster's DSN {:?} does not name its socket directory ({host})",
                    env.dsn
                )));
            }
            let dsn = env
                .dsn
                .replacen(&host, &format!("host={}", dir.display()), 1);
            Some((relay, dsn))
        }
        None => None,
    };
    let writers_dsn = relay.as_ref().map_or(env.dsn.as_str(), |(_, dsn)| dsn);
    let states: Vec<ConnectionState> = ConnectionState::ALL
        .into_iter()
        .filter(|s| relay.is_some() || s.wire().is_none())
        .collect();
    let pid = std::process::id();
    let owner_name = format!("agentstore-pg-bench-owner-{pid}");
    let zombie_name = format!("agentstore-pg-bench-zombie-{pid}");
    let long = lease("owner", Duration::from_secs(600));
    let (mut owner, _) = PgStore::create(
        &named_dsn(writers_dsn, &owner_name),
        &env.pg_root,
        "connection-owner",
        &env.workspace,
        Some(&long),
    )?;
    // The zombie's lease lapses at once; the heir takes the session over.
    let (mut zombie, _) = PgStore::create(
        &named_dsn(writers_dsn, &zombie_name),
        &env.pg_root,
        "connection-zombie",
        &env.workspace,
        Some(&lease("zombie", Duration::ZERO)),
    )?;
    let (_heir, _) = PgStore::open(
        &env.dsn,
        &env.pg_root,
        "connection-zombie",
        None,
        Some(&lease("heir", Duration::from_secs(600))),
    )?;
    let mut admin = client(&env.dsn)?;
    let event = message_of_json_size(EVENT_JSON_BYTES);
    // Puts `state`'s wire fault on, runs `write`, takes it off; a closing
    // fault that did not fire is the bench's failure: it measured nothing.
    let under = |state: ConnectionState,
                 what: &str,
                 write: &mut dyn FnMut() -> Result<Duration, BenchError>|
     -> Result<f64, BenchError> {
        let Some((relay, _)) = &relay else {
            return write().map(ms);
        };
        let fired = relay.fired();
        relay.arm(state.wire().unwrap_or(WireFault::None));
        let took = write();
        relay.arm(WireFault::None);
        let took = took?;
        let closing = matches!(
            state,
            ConnectionState::ResetBeforeCommit | ConnectionState::CommitAnswerLost
        );
        if closing && relay.fired() != fired + 1 {
            return Err(BenchError::Connection(format!(
                "{}: the fault never landed on the {what}",
                state.name()
            )));
        }
        Ok(ms(took))
    };
    // Per state: the appends, fenced writes and takeovers, in ms.
    type Times = (ConnectionState, Vec<f64>, Vec<f64>, Vec<f64>);
    let mut times: Vec<Times> = states
        .iter()
        .map(|&c| (c, Vec::new(), Vec::new(), Vec::new()))
        .collect();
    for round in 0..CONNECTION_ROUNDS {
        // Rotated per round, as the append section's slices are.
        for i in 0..times.len() {
            let n = times.len();
            let (state, appends, fenced, takeovers) = &mut times[(i + round) % n];
            let state = *state;
            if state == ConnectionState::EndedByServer {
                end_connections(&mut admin, &owner_name)?;
            }
            appends.push(under(state, "owner's append", &mut || {
                let start = Instant::now();
                owner.append(&event)?;
                Ok(start.elapsed())
            })?);
            if state.reaches_fenced() {
                if state == ConnectionState::EndedByServer {
                    end_connections(&mut admin, &zombie_name)?;
                }
                fenced.push(under(state, "fenced write", &mut || {
                    let start = Instant::now();
                    match zombie.append(&event) {
                        Err(StoreError::Fenced(_)) => Ok(start.elapsed()),
                        other => Err(BenchError::Connection(format!(
                            "the taken-over owner's append was not refused fenced: {other:?}"
                        ))),
                    }
                })?);
            }
            if state.reaches_takeover() {
                let session = format!("connection-takeover-{i}-{round}");
                let (mut dead, _) = PgStore::create(
                    &env.dsn,
                    &env.pg_root,
                    &session,
                    &env.workspace,
                    Some(&lease("dead", Duration::ZERO)),
                )?;
                for e in dying_run() {
                    dead.append(&e)?;
                }
                drop(dead);
                takeovers.push(under(state, "takeover", &mut || {
                    let start = Instant::now();
                    let (mut taker, took) = PgStore::open(
                        writers_dsn,
                        &env.pg_root,
                        &session,
                        None,
                        Some(&long),
                    )?;
                    if took.map_or(0, |t| t.recovery.appended) == 0 {
                        return Err(BenchError::Connection(format!(
                            "the takeover of {session} recovered nothing after a lapsed lease with a run and a call open"
                        )));
                    }
                    taker.append(&event)?;
                    Ok(start.elapsed())
                })?);
            }
        }
    }
    let rows = times
        .into_iter()
        .map(|(connection, appends, fenced, takeovers)| ConnectionRow {
            connection,
            append: Timing::of(appends),
            fenced: connection.reaches_fenced().then(|| Timing::of(fenced)),
            takeover: connection.reaches_takeover().then(|| Timing::of(takeovers)),
        })
        .collect();
    Ok(ConnectionSection {
        rounds: CONNECTION_ROUNDS,
        rows,
    })
}
