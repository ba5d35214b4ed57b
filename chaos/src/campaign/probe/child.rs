//! The probe child's side (`agentchaos probe`): the store it drives
//! (agentstore in this process, or an adapter), what it meets there
//! ([`ChildError`]), and the crash-free run's events replayed into a fresh
//! session. The child reports what the store did and must never judge it:
//! the verdicts are the harness's.

use std::path::{Path, PathBuf};

use agentchaos_protocol::event::{BlobRef, Event, Record, Seq};
use agentstore::{LogPosition, Scanner, Session, SessionId, SessionOptions, SessionPaths};

use crate::campaign::probe::{ProbeError, ProbeReply};
use crate::store::adapter::{AdapterBackend, Client, ErrorKind, OpenArgs};

/// What the probe child meets from the store: a refusal (with its kind),
/// the store broken (its adapter broke the protocol or died), or the
/// child's own side of the conversation failed.
#[derive(Debug)]
pub enum ChildError {
    Refused {
        kind: ErrorKind,
        message: String,
    },
    /// The store's adapter broke the protocol (a reply that is not JSON,
    /// the wrong id or shape, EOF, a timeout): the store's fault.
    Broken(String),
    /// The adapter could not be started, or a request not encoded.
    Harness(String),
}

impl ChildError {
    /// The probe's error when `at` (the operation) met this where the
    /// probe needs it to succeed: a refusal other than `io` and a broken
    /// adapter are the store's, an `io` refusal (the machine's) and the
    /// child's own failure the harness's.
    pub(super) fn at(self, at: &str) -> ProbeError {
        match self {
            ChildError::Refused {
                kind: ErrorKind::Io,
                message,
            } => ProbeError::Harness(format!("{at} refused with `io`: {message}")),
            ChildError::Refused { kind, message } => {
                ProbeError::Store(format!("{at} refused with `{kind}`: {message}"))
            }
            ChildError::Broken(m) => ProbeError::Store(format!("{at}: {m}")),
            ChildError::Harness(m) => ProbeError::Harness(format!("{at}: {m}")),
        }
    }
}

impl From<agentstore::Error> for ChildError {
    fn from(e: agentstore::Error) -> ChildError {
        use agentstore::Error as E;
        let kind = match &e {
            E::Io { .. } | E::Read { .. } | E::Poisoned { .. } => ErrorKind::Io,
            E::Damage { .. } | E::UnknownEventType { .. } | E::Foreign { .. } => ErrorKind::Damage,
            E::SessionLocked { .. } => ErrorKind::Locked,
            E::NoSuchSession { .. } | E::IncompleteSession { .. } => ErrorKind::NotFound,
            E::SessionExists { .. } => ErrorKind::Exists,
            E::Rule(_) => ErrorKind::Rule,
            E::InvalidSessionId { .. } | E::EventTooLarge { .. } | E::Invalid(_) => {
                ErrorKind::Invalid
            }
            E::LeaseHeld { .. } => ErrorKind::LeaseHeld,
            E::Fenced { .. } => ErrorKind::Fenced,
        };
        ChildError::Refused {
            kind,
            message: e.to_string(),
        }
    }
}

impl From<crate::store::adapter::ClientError> for ChildError {
    fn from(e: crate::store::adapter::ClientError) -> ChildError {
        match e.refusal_kind() {
            Some(kind) => ChildError::Refused {
                kind,
                message: e.to_string(),
            },
            None if matches!(
                e,
                crate::store::adapter::ClientError::Spawn { .. }
                    | crate::store::adapter::ClientError::Encode { .. }
            ) =>
            {
                ChildError::Harness(e.to_string())
            }
            None => ChildError::Broken(e.to_string()),
        }
    }
}

/// The store as the probe child drives it: agentstore in this process, or an adapter.
pub(super) enum Target {
    Reference {
        paths: SessionPaths,
        session: Box<Session>,
    },
    Adapter(Box<Client>),
}

impl Target {
    pub(super) fn open(args: &ChildArgs, workspace: Option<&Path>) -> Result<Target, ChildError> {
        let (root, session) = (args.root.as_path(), args.session.as_str());
        match args.adapter.as_ref() {
            None => {
                let id = SessionId::new(session)?;
                let options = || SessionOptions {
                    durability: args.durability,
                    ..SessionOptions::default()
                };
                let session = match workspace {
                    Some(ws) => Session::open_or_create(root, &id, ws, options())?.0,
                    None => Session::open(root, &id, options())?.0,
                };
                Ok(Target::Reference {
                    paths: SessionPaths::new(root, &id),
                    session: Box::new(session),
                })
            }
            Some(backend) => {
                let mut client = backend.client().map_err(|e| {
                    if e.store_fault() {
                        ChildError::Broken(e.message)
                    } else {
                        ChildError::Harness(e.message)
                    }
                })?;
                client.open(&OpenArgs {
                    root: root.to_path_buf(),
                    session: session.to_string(),
                    workspace: workspace.map(Path::to_path_buf),
                    create: workspace.is_some(),
                    lease: None,
                })?;
                Ok(Target::Adapter(Box::new(client)))
            }
        }
    }

    pub(super) fn append(&mut self, event: &Event) -> Result<Seq, ChildError> {
        match (self, event) {
            (Target::Reference { session, .. }, Event::ToolStarted { call_id }) => {
                let due = session.log().next_seq();
                let intent = session.start_tool(call_id)?;
                Ok(intent.ack().map_or(due, |a| a.seq()))
            }
            (Target::Reference { session, .. }, e) => Ok(session.append(e.clone())?.seq()),
            (Target::Adapter(c), Event::ToolStarted { call_id }) => Ok(c.start_tool(call_id)?.seq),
            (Target::Adapter(c), e) => Ok(c.append(e)?.seq),
        }
    }

    /// Writes `events` as parallel appenders do, each before any is
    /// acknowledged (one group, in Batch mode), then waits for each; a
    /// refused write first waits for those before it. Through an adapter,
    /// which acknowledges every write before the next is sent, each is
    /// appended in turn. The error names the write (from 0) it came from.
    pub(super) fn write_group(
        &mut self,
        events: &[Event],
    ) -> Result<Vec<Seq>, (usize, ChildError)> {
        let session = match self {
            Target::Reference { session, .. } => session,
            Target::Adapter(_) => {
                return events
                    .iter()
                    .enumerate()
                    .map(|(i, e)| self.append(e).map_err(|err| (i, err)))
                    .collect();
            }
        };
        let mut written = Vec::with_capacity(events.len());
        for (i, e) in events.iter().enumerate() {
            match session.write(e.clone()) {
                Ok(w) => written.push(w),
                Err(err) => {
                    for w in written {
                        let _ = session.wait(w);
                    }
                    return Err((i, err.into()));
                }
            }
        }
        written
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                session
                    .wait(w)
                    .map(|a| a.seq())
                    .map_err(|err| (i, err.into()))
            })
            .collect()
    }

    pub(super) fn recover(
        &mut self,
    ) -> Result<agentchaos_protocol::message::RecoveryState, ChildError> {
        match self {
            Target::Reference { session, .. } => Ok(session.recover()?),
            Target::Adapter(c) => Ok(c.recover()?),
        }
    }

    pub(super) fn put_blob(&mut self, bytes: &[u8]) -> Result<BlobRef, ChildError> {
        match self {
            Target::Reference { session, .. } => Ok(session.put_blob(bytes)?),
            Target::Adapter(c) => Ok(c.put_blob(bytes)?),
        }
    }

    pub(super) fn get_blob(&mut self, reference: &BlobRef) -> Result<Vec<u8>, ChildError> {
        match self {
            Target::Reference { session, .. } => Ok(session.get_blob(reference)?),
            Target::Adapter(c) => Ok(c.get_blob(reference)?),
        }
    }

    pub(super) fn events(&mut self) -> Result<Vec<Record>, ChildError> {
        match self {
            Target::Reference { paths, .. } => {
                let mut out = Vec::new();
                for item in Scanner::open(&paths.events(), LogPosition::START)? {
                    out.push(item?.1);
                }
                Ok(out)
            }
            Target::Adapter(c) => Ok(c.events(None)?),
        }
    }

    /// The records at `seqs` that the store serves, one `events` page
    /// each through an adapter (a reply stays under the client's limit
    /// however large the log).
    pub(super) fn records_at(&mut self, seqs: &[Seq]) -> Result<Vec<Record>, ChildError> {
        match self {
            Target::Reference { .. } => {
                let mut all = self.events()?;
                all.retain(|r| seqs.contains(&r.seq));
                Ok(all)
            }
            Target::Adapter(c) => {
                let mut out = Vec::new();
                for &seq in seqs {
                    let page = c.events_page(seq.checked_sub(1), Some(1))?;
                    out.extend(page.into_iter().filter(|r| r.seq == seq));
                }
                Ok(out)
            }
        }
    }
}

/// The child's arguments.
#[derive(Debug, Clone)]
pub struct ChildArgs {
    /// `damage`, `ledger`, `rule` or `lock`.
    pub what: String,
    pub root: PathBuf,
    pub session: String,
    /// Ledger and rule: the workspace of the fresh session.
    pub workspace: Option<PathBuf>,
    /// Ledger and rule: the events to replay and append, as JSON.
    pub events: Option<PathBuf>,
    /// The store behind `--adapter` (with the store processes the harness
    /// forked for this probe, if it did), or agentstore in this process.
    pub adapter: Option<AdapterBackend>,
    /// The reference store's durability (no adapter).
    pub durability: agentstore::Durability,
}

/// A refusal as the child reports it; `events`: the session's event count
/// before and after it (ledger).
pub(super) fn refused(
    at: &str,
    e: ChildError,
    events: Option<(u64, u64)>,
) -> Result<ProbeReply, ProbeError> {
    match e {
        ChildError::Refused { kind, message } => Ok(ProbeReply::Refused {
            at: at.to_string(),
            kind: kind.name().to_string(),
            message,
            events_before: events.map(|e| e.0),
            events_after: events.map(|e| e.1),
        }),
        e => Err(e.at(at)),
    }
}

/// The JSON events file of a ledger or rule probe.
pub(super) fn read_events<T: serde::de::DeserializeOwned>(
    args: &ChildArgs,
) -> Result<T, ProbeError> {
    let file = args
        .events
        .as_ref()
        .ok_or_else(|| ProbeError::Harness("--events is required".into()))?;
    let text =
        std::fs::read(file).map_err(|e| ProbeError::Harness(format!("{}: {e}", file.display())))?;
    serde_json::from_slice(&text)
        .map_err(|e| ProbeError::Harness(format!("{}: {e}", file.display())))
}

pub(super) fn fail(what: &str) -> impl FnOnce(ChildError) -> ProbeError + '_ {
    move |e| e.at(what)
}

/// Appends the crash-free run's `events` (a referenced blob's bytes are
/// not in the log: any stored blob will do); a refusal is the probe's
/// situation not reached ([`ProbeReply::NotReplayed`]).
pub(super) fn replay_into(
    target: &mut Target,
    events: &[Event],
) -> Result<Option<ProbeReply>, ProbeError> {
    for e in events {
        let e = match e {
            Event::ToolResult {
                parent,
                call_id,
                status,
                output,
                blob: Some(_),
            } => Event::ToolResult {
                parent: parent.clone(),
                call_id: call_id.clone(),
                status: *status,
                output: output.clone(),
                blob: Some(
                    target
                        .put_blob(format!("ledger probe stand-in for {call_id}").as_bytes())
                        .map_err(fail("put_blob"))?,
                ),
            },
            other => other.clone(),
        };
        if let Err(err) = target.append(&e) {
            return match err {
                ChildError::Refused { kind, message } => Ok(Some(ProbeReply::NotReplayed {
                    message: format!("{} refused with `{kind}`: {message}", e.type_name()),
                })),
                err => Err(err.at(&format!("replaying {}", e.type_name()))),
            };
        }
    }
    Ok(None)
}

/// Opens the probe's session in `--workspace` and replays the crash-free
/// run's `replay` into it: the target, or the reply saying the probe's
/// situation was not reached.
pub(super) fn open_replayed(
    args: &ChildArgs,
    replay: &[Event],
) -> Result<Result<Target, ProbeReply>, ProbeError> {
    let ws = args
        .workspace
        .as_deref()
        .ok_or_else(|| ProbeError::Harness("--workspace is required".into()))?;
    let mut target = Target::open(args, Some(ws)).map_err(fail("open"))?;
    Ok(match replay_into(&mut target, replay)? {
        None => Ok(target),
        Some(not_replayed) => Err(not_replayed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_child_meets_is_the_stores_fault_unless_io_or_its_own() {
        let refused = |kind| ChildError::Refused {
            kind,
            message: "no".into(),
        };
        assert!(refused(ErrorKind::Locked).at("first open").store_fault());
        assert!(!refused(ErrorKind::Io).at("first open").store_fault());
        assert!(ChildError::Broken("EOF".into()).at("open").store_fault());
        assert!(!ChildError::Harness("spawn".into()).at("open").store_fault());
        assert_eq!(
            refused(ErrorKind::Locked).at("first open").to_string(),
            "the store under test failed: first open refused with `locked`: no"
        );
    }
}
