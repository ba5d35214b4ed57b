//! The world: the remote service every trial's side effects land in.
//!
//! The harness process owns one [`World`] per trial: a Unix-socket server
//! that outlives every kill of the child agent. It records every
//! application of every operation id, in order and with the life of the
//! agent that sent it, and answers a status query by operation id. It is
//! deliberately not idempotent: applying an operation id twice counts twice,
//! so a duplicate side effect is visible instead of hidden. It must never
//! deduplicate, and never be reachable from another trial. Linux/Unix only.
//!
//! Wire format, one JSON object per line each way:
//! `{"op":"apply","id":"op-r1-3","service":"deploy","action":"v2","life":0}` →
//! `{"count":1,"external_ref":"deploy/op-r1-3#1"}`;
//! `{"op":"status","id":"op-r1-3"}` → `{"count":1,"external_ref":"deploy/op-r1-3#1"}`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

/// The longest socket path Linux accepts (`sun_path` minus the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// A request from the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Apply {
        id: String,
        service: String,
        action: String,
        life: u32,
    },
    Status {
        id: String,
    },
}

/// The world's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// How many times the operation id has been applied so far.
    pub count: u32,
    /// The reference of the first application (what a real service would return).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One application of an operation, as the world saw it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Application {
    pub id: String,
    pub service: String,
    pub action: String,
    /// Which life of the agent (0 = the first process) applied it.
    pub life: u32,
}

#[derive(Debug, Default)]
struct State {
    applications: Vec<Application>,
}

impl State {
    fn answer(&mut self, req: Request) -> Reply {
        let (id, applied) = match req {
            Request::Apply {
                id,
                service,
                action,
                life,
            } => {
                self.applications.push(Application {
                    id: id.clone(),
                    service,
                    action,
                    life,
                });
                (id, true)
            }
            Request::Status { id } => (id, false),
        };
        let mut mine = self.applications.iter().filter(|a| a.id == id);
        let first = mine.next();
        let count = first.map_or(0, |_| 1 + mine.count() as u32);
        assert!(!applied || count > 0);
        Reply {
            count,
            external_ref: first.map(|a| format!("{}/{}#1", a.service, a.id)),
            error: None,
        }
    }
}

/// The server side, owned by the harness for one trial.
#[derive(Debug)]
pub struct World {
    path: PathBuf,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl World {
    /// Starts serving on a new socket at `path`.
    pub fn start(path: &Path) -> std::io::Result<World> {
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "socket path {} is longer than {MAX_SOCKET_PATH} bytes; use a shorter --dir",
                    path.display()
                ),
            ));
        }
        let listener = UnixListener::bind(path)?;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let state = Arc::clone(&state);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("world".into())
                .spawn(move || serve(listener, &state, &stop))?
        };
        Ok(World {
            path: path.to_path_buf(),
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// Every application so far, in the order the world received them.
    pub fn applications(&self) -> Vec<Application> {
        lock(&self.state).applications.clone()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop; it sees the flag and returns.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// One agent process at a time talks to a trial's world, so connections
/// are served one after the other on this thread.
fn serve(listener: UnixListener, state: &Mutex<State>, stop: &AtomicBool) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let Ok(write_half) = conn.try_clone() else {
            continue;
        };
        let mut out = std::io::BufWriter::new(write_half);
        for line in BufReader::new(conn).lines() {
            let Ok(line) = line else { break };
            let reply = match serde_json::from_str::<Request>(&line) {
                Ok(req) => lock(state).answer(req),
                Err(e) => Reply {
                    count: 0,
                    external_ref: None,
                    error: Some(format!("bad request: {e}")),
                },
            };
            let mut bytes = serde_json::to_vec(&reply).expect("a reply serializes");
            bytes.push(b'\n');
            // The agent may have been killed after sending: ignore a broken pipe.
            if out.write_all(&bytes).and_then(|()| out.flush()).is_err() {
                break;
            }
        }
    }
}

/// The world could not be asked: its socket, a reply that is not one, or a
/// request it refused. The harness's side of the agent, never the store's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WorldError(String);

/// The agent's side: one connection, opened on first use.
#[derive(Debug)]
pub struct WorldClient {
    path: PathBuf,
    conn: Option<(BufReader<UnixStream>, UnixStream)>,
}

impl WorldClient {
    pub fn new(path: &Path) -> WorldClient {
        WorldClient {
            path: path.to_path_buf(),
            conn: None,
        }
    }

    fn call(&mut self, req: &Request) -> Result<Reply, WorldError> {
        if self.conn.is_none() {
            let s = UnixStream::connect(&self.path).map_err(|e| {
                WorldError(format!(
                    "cannot reach the world at {}: {e}",
                    self.path.display()
                ))
            })?;
            let r = s
                .try_clone()
                .map_err(|e| WorldError(format!("world socket: {e}")))?;
            self.conn = Some((BufReader::new(r), s));
        }
        let (reader, writer) = self.conn.as_mut().expect("connected above");
        let mut bytes = serde_json::to_vec(req).expect("a request serializes");
        bytes.push(b'\n');
        writer
            .write_all(&bytes)
            .map_err(|e| WorldError(format!("world request failed: {e}")))?;
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .map_err(|e| WorldError(format!("world reply failed: {e}")))?;
        let reply: Reply = serde_json::from_str(&line)
            .map_err(|e| WorldError(format!("world reply {line:?} is not valid: {e}")))?;
        match reply.error {
            Some(e) => Err(WorldError(format!("world refused the request: {e}"))),
            None => Ok(reply),
        }
    }

    /// Applies operation `id` (not idempotent: every call counts).
    pub fn apply(
        &mut self,
        id: &str,
        service: &str,
        action: &str,
        life: u32,
    ) -> Result<Reply, WorldError> {
        self.call(&Request::Apply {
            id: id.to_string(),
            service: service.to_string(),
            action: action.to_string(),
            life,
        })
    }

    /// How many times operation `id` was applied, without applying it.
    pub fn status(&mut self, id: &str) -> Result<Reply, WorldError> {
        self.call(&Request::Status { id: id.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_duplicates_and_answers_status_across_connections() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::start(&dir.path().join("w.sock")).unwrap();
        let mut a = WorldClient::new(world.path());
        assert_eq!(a.status("op-1").unwrap().count, 0);
        let r = a.apply("op-1", "deploy", "v2", 0).unwrap();
        assert_eq!(
            (r.count, r.external_ref.as_deref()),
            (1, Some("deploy/op-1#1"))
        );
        drop(a);
        // A second process (life) connects after the first one died.
        let mut b = WorldClient::new(world.path());
        assert_eq!(b.status("op-1").unwrap().count, 1);
        assert_eq!(b.apply("op-1", "deploy", "v2", 1).unwrap().count, 2);
        let apps = world.applications();
        assert_eq!(apps.len(), 2);
        assert_eq!((apps[0].life, apps[1].life), (0, 1));
    }
}
