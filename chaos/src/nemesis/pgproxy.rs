//! Strikes inside one request of a PostgreSQL store's worker: the
//! `ACTION@K.S` grammar and the wire-protocol proxy that carries them out.
//!
//! Each worker of a `--postgres` trial with a statement strike connects
//! through a proxy of its own: a Unix socket in a directory of its own
//! (its DSN's `host`), every connection relayed to the cluster's socket.
//! The proxy reads the frontend's message framing (never its contents,
//! except the SQL text of `Query` and `Parse`) and groups the messages
//! into round trips, each ending in `Sync`, `Query`, `Flush` or
//! `Terminate`. A round trip with an `Execute` or a `Query` is one
//! statement; a `Parse`-only one (preparing) is not counted. Once armed
//! (the harness arms it right before the request it strikes), the proxy
//! counts the statements of that worker and holds the round trip the
//! strike names: the S-th statement (`@K.S`), or the first round trip
//! after the S-th statement's reply reached the worker (`@K.Sr`). The
//! harness then decides what becomes of it ([`Release`]): forwarded,
//! never sent (the connection closed), or sent with the server's answer
//! swallowed before the connection is closed (a lost reply).
//!
//! It also records the SQL text of every statement it counts (a `Query`'s,
//! or the `Parse` an `Execute`'s `Bind` names), and of the statement an
//! armed strike names: what the campaign's statement coverage is made of.
//!
//! A held round trip whose connection is inside a transaction that sent
//! anything after its `BEGIN` holds that transaction's locks while it is
//! held (preparing a statement alone takes a share lock on each table it
//! names): [`Held::locked`] says so, from the server's `ReadyForQuery`
//! status.
//!
//! This module relays, counts and holds; it never signals a process nor
//! judges what the store did.

use std::fmt;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// What a statement strike does at its point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementAction {
    /// Hold the round trip while another worker takes the session over,
    /// then let it go.
    Pause,
    /// SIGKILL the worker and the process that holds the connection.
    Kill,
    /// Close both sides of the connection; the worker lives on.
    Reset,
    /// Never forward the round trip, and keep the connection open.
    Drop,
    /// Forward the round trip, then close both sides of the connection
    /// once the server answered it, the answer never relayed: the worker
    /// cannot tell whether its statement ran (a lost `COMMIT` reply).
    Cut,
}

impl StatementAction {
    /// Every action, as a plan spells it.
    pub const ALL: [StatementAction; 5] = [
        StatementAction::Pause,
        StatementAction::Kill,
        StatementAction::Reset,
        StatementAction::Drop,
        StatementAction::Cut,
    ];

    /// As a plan spells it: `pause`, `kill`, `reset`, `drop`, `cut`.
    pub fn name(self) -> &'static str {
        match self {
            StatementAction::Pause => "pause",
            StatementAction::Kill => "kill",
            StatementAction::Reset => "reset",
            StatementAction::Drop => "drop",
            StatementAction::Cut => "cut",
        }
    }

    /// Its kind in reports.
    pub fn kind(self) -> &'static str {
        match self {
            StatementAction::Pause => "statement-pause",
            StatementAction::Kill => "statement-kill",
            StatementAction::Reset => "connection-reset",
            StatementAction::Drop => "connection-drop",
            StatementAction::Cut => "lost-reply",
        }
    }
}

/// A strike inside request K (K as in `pause@K`: the request after the
/// owner's K-th step since its grant): before its `statement`-th
/// statement (1-based), or after that statement's reply (`after_reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatementStrike {
    pub action: StatementAction,
    pub statement: usize,
    pub after_reply: bool,
}

impl StatementStrike {
    /// `kind` and `at` of `ACTION@K.S` or `ACTION@K.Sr`: the strike and
    /// K; None when it is not one (`at` without a dot) or does not parse.
    pub fn parse(kind: &str, at: &str) -> Option<(StatementStrike, usize)> {
        let (k, s) = at.split_once('.')?;
        let action = StatementAction::ALL
            .into_iter()
            .find(|a| a.name() == kind)?;
        let (s, after_reply) = match s.strip_suffix('r') {
            Some(s) => (s, true),
            None => (s, false),
        };
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(k) || !digits(s) {
            return None;
        }
        let statement = s.parse().ok().filter(|&s| s >= 1)?;
        let strike = StatementStrike {
            action,
            statement,
            after_reply,
        };
        Some((strike, k.parse().ok()?))
    }
}

impl fmt::Display for StatementStrike {
    /// The part after `@K`: `.S` or `.Sr`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = if self.after_reply { "r" } else { "" };
        write!(f, ".{}{r}", self.statement)
    }
}

/// What the harness does with a held round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Forward it and relay on.
    Forward,
    /// Close both sides of its connection, nothing forwarded.
    Close,
    /// Forward it, swallow the server's answer, then close both sides.
    LoseReply,
}

/// A held round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The process at the other end of the worker's connection
    /// (`SO_PEERCRED`): the store's process (the adapter).
    pub peer: Option<i32>,
    /// Its transaction sent something after `BEGIN` and has not ended.
    pub locked: bool,
}

#[derive(Default)]
struct State {
    armed: Option<StatementStrike>,
    /// Statements since the last arming.
    count: usize,
    /// The armed statement's reply went by: strike at the next round trip.
    after_pending: bool,
    held: Option<Held>,
    release: Option<Release>,
    stopping: bool,
    streams: Vec<UnixStream>,
    /// Every statement's SQL text since the proxy started, in order.
    sql: Vec<String>,
    /// The SQL text of the statement the armed strike names, once seen.
    struck_sql: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One worker's proxy: its socket, and the connections it relays.
pub struct Proxy {
    socket: PathBuf,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Listens on `dir/.s.PGSQL.PORT` (created) and relays every
    /// connection to `upstream` (the cluster's socket).
    pub fn start(dir: &Path, port: u16, upstream: PathBuf) -> std::io::Result<Proxy> {
        std::fs::create_dir_all(dir)?;
        let socket = dir.join(format!(".s.PGSQL.{port}"));
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.lock().stopping {
                    break;
                }
                let Ok(client) = client else { continue };
                let shared = Arc::clone(&accepting);
                let upstream = upstream.clone();
                std::thread::spawn(move || relay(client, &upstream, shared));
            }
        });
        Ok(Proxy { socket, shared })
    }

    /// Counts this worker's statements from 0 on, and strikes at `strike`
    /// (None: counts only).
    pub fn arm(&self, strike: Option<StatementStrike>) {
        let mut st = self.shared.lock();
        st.armed = strike;
        st.count = 0;
        st.after_pending = false;
        st.held = None;
        st.release = None;
        st.struck_sql = None;
    }

    /// The SQL text of every statement this worker sent since the proxy
    /// started, in order.
    pub fn statements(&self) -> Vec<String> {
        self.shared.lock().sql.clone()
    }

    /// The SQL text of the statement the armed strike names, once it was
    /// sent: held before it, or its reply let through.
    pub fn struck_statement(&self) -> Option<String> {
        self.shared.lock().struck_sql.clone()
    }

    /// Statements since the last arming.
    pub fn count(&self) -> usize {
        self.shared.lock().count
    }

    /// The round trip held at the armed strike, once there is one.
    pub fn held(&self) -> Option<Held> {
        self.shared.lock().held
    }

    /// Lets the held round trip go (or closes its connection) and disarms.
    pub fn release(&self, release: Release) {
        let mut st = self.shared.lock();
        st.armed = None;
        st.release = Some(release);
        self.shared.changed.notify_all();
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Proxy({})", self.socket.display())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.stopping = true;
        st.release = Some(Release::Close);
        for s in st.streams.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.shared.changed.notify_all();
        drop(st);
        // Wakes the accepting thread, which sees `stopping`.
        let _ = UnixStream::connect(&self.socket);
        let _ = std::fs::remove_file(&self.socket);
    }
}

const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

fn read_exact(r: &mut impl Read, n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; n];
    r.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// One typed message: its type, and its bytes (type included).
fn message(r: &mut impl Read) -> Option<(u8, Vec<u8>)> {
    let head = read_exact(r, 5)?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let body = read_exact(r, len.checked_sub(4)?)?;
    let mut all = head;
    all.extend(body);
    Some((all[0], all))
}

/// The NUL-terminated string at the start of `bytes`, and what follows it.
fn cstr(bytes: &[u8]) -> Option<(String, &[u8])> {
    let end = bytes.iter().position(|&b| b == 0)?;
    Some((
        String::from_utf8_lossy(&bytes[..end]).into_owned(),
        &bytes[end + 1..],
    ))
}

/// SQL text as the coverage names it: runs of whitespace as one space.
fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What one connection's frontend prepared and bound, to name the SQL
/// text of each `Execute`.
#[derive(Default)]
struct Prepared {
    /// Prepared statement name to its SQL text (`Parse`).
    by_name: std::collections::HashMap<String, String>,
    /// The SQL text of the statement the last `Bind` named.
    bound: Option<String>,
}

impl Prepared {
    /// Takes in one frontend message (`bytes`, type byte included); the
    /// SQL text of the statement it runs, if it runs one.
    fn statement_of(&mut self, kind: u8, bytes: &[u8]) -> Option<String> {
        let body = bytes.get(5..)?;
        match kind {
            b'Q' => cstr(body).map(|(sql, _)| one_line(&sql)),
            b'P' => {
                let (name, rest) = cstr(body)?;
                let (sql, _) = cstr(rest)?;
                self.by_name.insert(name, one_line(&sql));
                None
            }
            b'B' => {
                let (_portal, rest) = cstr(body)?;
                let (name, _) = cstr(rest)?;
                self.bound = self.by_name.get(&name).cloned();
                None
            }
            b'E' => Some(
                self.bound
                    .clone()
                    .unwrap_or_else(|| "(a statement prepared before the proxy saw it)".into()),
            ),
            _ => None,
        }
    }
}

fn relay(mut client: UnixStream, upstream: &Path, shared: Arc<Shared>) {
    let peer = nix::sys::socket::getsockopt(&client, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.pid());
    let Ok(mut server) = UnixStream::connect(upstream) else {
        return;
    };
    {
        let mut st = shared.lock();
        if st.stopping {
            return;
        }
        for s in [&client, &server] {
            if let Ok(c) = s.try_clone() {
                st.streams.push(c);
            }
        }
    }
    // The server's last ReadyForQuery said: inside a transaction; and
    // something was sent inside it since.
    let in_tx = Arc::new(AtomicBool::new(false));
    let locked = Arc::new(AtomicBool::new(false));
    let (Ok(mut to_client), Ok(mut from_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let (replies_in_tx, replies_locked) = (Arc::clone(&in_tx), Arc::clone(&locked));
    // Set before a round trip whose answer is to be lost: the relay of
    // replies swallows from then on, and says when the answer ended.
    let muted = Arc::new(AtomicBool::new(false));
    let replies_muted = Arc::clone(&muted);
    let (answered, answer_ended) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        // Server to client, message by message: `ReadyForQuery` says
        // whether the connection is inside a transaction (status T or E).
        while let Some((kind, bytes)) = message(&mut from_server) {
            if kind == b'Z' {
                let idle = bytes.get(5) == Some(&b'I');
                replies_in_tx.store(!idle, Ordering::SeqCst);
                if idle {
                    replies_locked.store(false, Ordering::SeqCst);
                }
            }
            if replies_muted.load(Ordering::SeqCst) {
                if kind == b'Z' {
                    let _ = answered.send(());
                    return;
                }
                continue;
            }
            if to_client.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
    });
    // The startup packet: no type byte; an encryption request is declined.
    loop {
        let Some(len) = read_exact(&mut client, 4) else {
            return;
        };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(body) = len.checked_sub(4).and_then(|n| read_exact(&mut client, n)) else {
            return;
        };
        let code = body
            .get(..4)
            .map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        if code == SSL_REQUEST || code == GSSENC_REQUEST {
            if client.write_all(b"N").is_err() {
                return;
            }
            continue;
        }
        let mut packet = (len as u32).to_be_bytes().to_vec();
        packet.extend(body);
        if server.write_all(&packet).is_err() {
            return;
        }
        break;
    }
    let mut prepared = Prepared::default();
    loop {
        // One round trip: messages up to Sync, Query, Flush or Terminate.
        let mut group = Vec::new();
        let mut statement = None;
        loop {
            let Some((kind, bytes)) = message(&mut client) else {
                let _ = server.shutdown(Shutdown::Both);
                return;
            };
            if let Some(sql) = prepared.statement_of(kind, &bytes) {
                statement = Some(sql);
            }
            group.extend(bytes);
            if matches!(kind, b'S' | b'Q' | b'H' | b'X') {
                break;
            }
        }
        let mut st = shared.lock();
        let mut strike = st.after_pending;
        if let Some(sql) = statement {
            st.count += 1;
            if let Some(armed) = st.armed.filter(|a| a.statement == st.count) {
                strike |= !armed.after_reply;
                st.after_pending = armed.after_reply;
                st.struck_sql = Some(sql.clone());
            }
            st.sql.push(sql);
        }
        if strike && st.armed.is_some() {
            st.after_pending = false;
            st.held = Some(Held {
                peer,
                locked: locked.load(Ordering::SeqCst),
            });
            shared.changed.notify_all();
            while st.release.is_none() {
                st = shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            match st.release {
                Some(Release::Close) => {
                    drop(st);
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                    return;
                }
                Some(Release::LoseReply) => {
                    drop(st);
                    muted.store(true, Ordering::SeqCst);
                    if server.write_all(&group).is_ok() {
                        // The server ran it and answered (or closed).
                        let _ = answer_ended.recv();
                    }
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                    return;
                }
                _ => {}
            }
        }
        drop(st);
        if in_tx.load(Ordering::SeqCst) {
            locked.store(true, Ordering::SeqCst);
        }
        if server.write_all(&group).is_err() {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frontend message as the wire carries it: type, length, body.
    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend(((body.len() + 4) as u32).to_be_bytes());
        m.extend(body);
        m
    }

    #[test]
    fn an_execute_is_named_by_the_sql_its_bind_prepared_and_a_query_by_its_own() {
        let mut p = Prepared::default();
        let parse = msg(b'P', b"s0\0SELECT  1\n  FROM t\0\0\0");
        assert_eq!(p.statement_of(b'P', &parse), None);
        assert_eq!(p.statement_of(b'B', &msg(b'B', b"\0s0\0\0\0")), None);
        assert_eq!(
            p.statement_of(b'E', &msg(b'E', b"\0\0\0\0\0")).as_deref(),
            Some("SELECT 1 FROM t")
        );
        assert_eq!(
            p.statement_of(b'Q', &msg(b'Q', b"BEGIN\0")).as_deref(),
            Some("BEGIN")
        );
        // A Bind of a statement it never saw prepared.
        p.statement_of(b'B', &msg(b'B', b"\0s9\0\0\0"));
        assert!(p
            .statement_of(b'E', &msg(b'E', b"\0\0\0\0\0"))
            .unwrap()
            .starts_with("(a statement prepared before"));
    }

    #[test]
    fn statement_points_parse_and_bad_ones_do_not() {
        let (s, k) = StatementStrike::parse("pause", "3.1").unwrap();
        assert_eq!(
            (s.action, s.statement, s.after_reply, k),
            (StatementAction::Pause, 1, false, 3)
        );
        let (s, k) = StatementStrike::parse("reset", "0.12r").unwrap();
        assert_eq!(
            (s.action, s.statement, s.after_reply, k),
            (StatementAction::Reset, 12, true, 0)
        );
        assert_eq!(s.to_string(), ".12r");
        assert_eq!(
            StatementStrike::parse("kill", "3.1").map(|(s, _)| s.to_string()),
            Some(".1".to_string())
        );
        for (kind, at) in [
            ("pause", "3"),
            ("pause", "3.0"),
            ("pause", "3."),
            ("pause", ".1"),
            ("pause", "3.1x"),
            ("pause", "3.r"),
            ("restart", "3.1"),
            ("drop", "3.-1"),
        ] {
            assert_eq!(StatementStrike::parse(kind, at), None, "{kind}@{at}");
        }
    }
}
