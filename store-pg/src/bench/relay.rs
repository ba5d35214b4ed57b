//! A relay between the bench's writers and its private cluster (Unix
//! sockets, Linux), through which the connection section puts one fault
//! on the wire while a write runs: each read from the server held a fixed
//! delay, the connection closed right before a `COMMIT`, or a `COMMIT`
//! sent and its answer lost.
//!
//! It reads the frontend protocol's framing only to find a `COMMIT`
//! (a simple `Query`, as the client library sends it); it never changes a
//! byte it relays. The closing faults fire once per arming, so the
//! store's retry on a new connection goes through; [`Relay::fired`]
//! counts them, so the bench can tell a fault that never landed.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The startup code of an SSL request, which the relay declines.
const SSL_REQUEST: u32 = 80_877_103;
/// The startup code of a GSSAPI encryption request, declined the same way.
const GSSENC_REQUEST: u32 = 80_877_104;

/// What the relay does to the writes that go through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFault {
    /// Relay everything at once.
    None,
    /// Hold each read from the server this long before relaying it.
    Delay(Duration),
    /// Close both sides of the connection that sends the next `COMMIT`,
    /// the `COMMIT` never forwarded (the server rolls its transaction back).
    ResetBeforeCommit,
    /// Forward the next `COMMIT`, then close both sides of its connection
    /// as soon as the server answers, the answer never relayed.
    LoseCommitAnswer,
}

struct Shared {
    fault: Mutex<WireFault>,
    fired: AtomicUsize,
}

impl Shared {
    fn fault(&self) -> WireFault {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The armed closing fault, disarmed: it fires once.
    fn take_commit_fault(&self) -> Option<WireFault> {
        let mut fault = self.fault.lock().unwrap_or_else(|e| e.into_inner());
        match *fault {
            f @ (WireFault::ResetBeforeCommit | WireFault::LoseCommitAnswer) => {
                *fault = WireFault::None;
                self.fired.fetch_add(1, Ordering::SeqCst);
                Some(f)
            }
            _ => None,
        }
    }
}

/// A listening relay; its socket is gone when it is dropped.
pub struct Relay {
    socket: PathBuf,
    shared: Arc<Shared>,
}

impl Relay {
    /// Listens in `dir` as a server on `port` would
    /// (`dir/.s.PGSQL.<port>`), relaying every connection to `upstream`.
    pub fn start(dir: &Path, port: u16, upstream: PathBuf) -> std::io::Result<Relay> {
        std::fs::create_dir_all(dir)?;
        let socket = dir.join(format!(".s.PGSQL.{port}"));
        let listener = UnixListener::bind(&socket)?;
        let shared = Arc::new(Shared {
            fault: Mutex::new(WireFault::None),
            fired: AtomicUsize::new(0),
        });
        let for_listener = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let shared = Arc::clone(&for_listener);
                let upstream = upstream.clone();
                std::thread::spawn(move || relay(client, &upstream, shared));
            }
        });
        Ok(Relay { socket, shared })
    }

    /// Puts `fault` on the wire from now on (a closing fault: until it fires).
    pub fn arm(&self, fault: WireFault) {
        *self.shared.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }

    /// How many closing faults fired so far.
    pub fn fired(&self) -> usize {
        self.shared.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The listening thread stays blocked in accept; with the socket
        // gone no one can reach it, and it ends with the process.
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn read_exact(r: &mut impl Read, n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; n];
    r.read_exact(&mut buf).ok()?;
    Some(buf)
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Whether a frontend message (type byte first) is the simple query `COMMIT`.
fn is_commit(message: &[u8]) -> bool {
    message[0] == b'Q'
        && message[5..].split(|&b| b == 0).next().is_some_and(|sql| {
            String::from_utf8_lossy(sql)
                .trim()
                .eq_ignore_ascii_case("COMMIT")
        })
}

fn relay(mut client: UnixStream, upstream: &Path, shared: Arc<Shared>) {
    let Ok(mut server) = UnixStream::connect(upstream) else {
        return;
    };
    let (Ok(mut to_client), Ok(mut from_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    // Set by the client's side once it forwarded a `COMMIT` whose answer
    // is to be lost.
    let lose_answer = Arc::new(AtomicBool::new(false));
    let losing = Arc::clone(&lose_answer);
    let for_server_side = Arc::clone(&shared);
    std::thread::spawn(move || {
        let mut buf = vec![0; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if losing.load(Ordering::SeqCst) {
                break;
            }
            if let WireFault::Delay(d) = for_server_side.fault() {
                std::thread::sleep(d);
            }
            if to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
        let _ = from_server.shutdown(Shutdown::Both);
    });
    // The startup packet has no type byte; an encryption request is declined.
    loop {
        let Some(head) = read_exact(&mut client, 4) else {
            return;
        };
        let len = be_u32(&head) as usize;
        let Some(body) = len.checked_sub(4).and_then(|n| read_exact(&mut client, n)) else {
            return;
        };
        let code = body.get(..4).map_or(0, be_u32);
        if code == SSL_REQUEST || code == GSSENC_REQUEST {
            if client.write_all(b"N").is_err() {
                return;
            }
            continue;
        }
        let mut packet = head;
        packet.extend(body);
        if server.write_all(&packet).is_err() {
            return;
        }
        break;
    }
    while let Some(mut message) = read_exact(&mut client, 5) {
        let len = be_u32(&message[1..5]) as usize;
        let Some(body) = len.checked_sub(4).and_then(|n| read_exact(&mut client, n)) else {
            break;
        };
        message.extend(body);
        if is_commit(&message) {
            match shared.take_commit_fault() {
                Some(WireFault::ResetBeforeCommit) => break,
                Some(_) => lose_answer.store(true, Ordering::SeqCst),
                None => {}
            }
        }
        if server.write_all(&message).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    // A lost answer: the server's side closes both once the answer came.
    if !lose_answer.load(Ordering::SeqCst) {
        let _ = server.shutdown(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> Vec<u8> {
        let mut m = vec![b'Q'];
        m.extend(((sql.len() + 5) as u32).to_be_bytes());
        m.extend(sql.as_bytes());
        m.push(0);
        m
    }

    #[test]
    fn only_a_simple_commit_query_is_a_commit() {
        assert!(is_commit(&query("COMMIT")));
        assert!(is_commit(&query(" commit ")));
        assert!(!is_commit(&query("START TRANSACTION")));
        assert!(!is_commit(&query("COMMIT PREPARED 'x'")));
        let mut parse = query("COMMIT");
        parse[0] = b'P';
        assert!(!is_commit(&parse));
    }
}
