//! The model of a failing trial's timeline: what each life of the agent
//! did, in the order the harness saw it, with what the checker's own
//! functions say was lost. Derived from a [`History`] once, for failing
//! trials only (a campaign keeps it instead of the history), and drawn by
//! [`crate::report::html::svg`]. It holds words and facts; it never judges anything the
//! checker did not ([`check::lost_acks`] is the checker's own reading).

use std::collections::{BTreeMap, HashMap};

use agentchaos_protocol::event::{Record, Seq};

use crate::agent::tools::tagged_operation;
use crate::agent::wire::fingerprint;
use crate::check;
use crate::history::{History, LifeEnd};
use crate::model::{describe_event, phase_name};
use crate::nemesis::syscall::{FaultOutcome, FaultReport};
use crate::nemesis::{Crash, Plan};
use crate::store::Observation;

/// A trial, life by life, and the disk at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    pub lives: Vec<Lane>,
    /// The disk at the end of the trial.
    pub end: Observed,
    /// Workspace lines that carry the same operation's tag more than once
    /// at the end of the trial (a local effect applied twice).
    pub workspace: Vec<Tagged>,
}

/// An operation's tag on more than one line of a workspace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tagged {
    pub file: String,
    pub operation: String,
    pub lines: usize,
}

/// One agent process: its rows in the order they happened, and what the
/// world applied for it (in the world's order; the world does not say
/// where between the rows each application fell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub life: u32,
    pub rows: Vec<Row>,
    pub world: Vec<Applied>,
}

/// One thing a life did or the harness did to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Row {
    /// The store's first recovery in this life, as the agent reported it.
    Recovered {
        appended: u64,
        interrupted: Vec<String>,
    },
    /// A call the recovery reported uncertain, with its phase.
    Uncertain { call: String, phase: &'static str },
    /// What the second recovery appended, by its own account.
    RecoveredAgain { appended: u64 },
    /// An event the agent sent to the store.
    Append(Append),
    /// An injected error the process went on after (ENOSPC, EIO).
    Fault { text: String },
    /// The crash the plan put on this life.
    Crash { text: String },
    /// How the life ended when no planned crash ended it.
    End { text: String, clean: bool },
    /// What the power cut removed.
    PowerCut { text: String },
    /// The harness looked at the disk.
    Observed(Observed),
}

/// An event the agent sent, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    /// The event in words (`seq 3 tool_started c1`), as far as the harness
    /// can name it: from the logs it saw or the crash-free run's.
    pub label: String,
    pub ack: Ack,
    /// Acknowledged and then missing (or changed): where it was first
    /// found missing and what the log held instead.
    pub lost: Option<Lost>,
}

/// The store's answer to an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    Acked(Seq),
    /// Sent before the injected error of this life, acknowledged after it.
    AckedAfterFault(Seq),
    /// Refused with an I/O error.
    Refused,
    /// No answer before the process ended.
    Never,
}

/// Where an acknowledged event was first found missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// The observation's place: lane (or `None`: the end) and row.
    pub at: Option<(usize, usize)>,
    pub when: String,
    pub holds: String,
}

/// The disk as the harness observed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub when: String,
    pub events: usize,
    /// Acknowledged events it does not hold.
    pub missing: usize,
    pub torn: Option<String>,
    pub damage: Option<String>,
}

/// One application of an operation in the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub operation: String,
    pub service: String,
    pub action: String,
    /// This is the `nth` application (1-based) of `of` in the whole trial.
    pub nth: usize,
    pub of: usize,
}

impl Applied {
    /// Applied more than once in the trial: `effect-at-most-once`'s finding.
    pub fn repeated(&self) -> bool {
        self.of > 1
    }
}

impl Timeline {
    /// The timeline of `h`, a trial of `plan` whose crashes `crashes`
    /// describes life by life ([`crate::campaign::describe::describe_crashes`]);
    /// `reference` is the crash-free run's log, to name events the trial's
    /// own logs lost.
    pub fn of(h: &History, plan: &Plan, crashes: &[String], reference: &[Record]) -> Timeline {
        let moments = check::moments(h);
        let names = Names::of(h, reference);
        let mut lost_at: BTreeMap<(usize, usize), Lost> = BTreeMap::new();
        let mut lanes: Vec<Lane> = Vec::new();
        // Each observation's row, as it is placed; then the lost acks each
        // one shows are attached to the first row that shows them.
        let mut placed: Vec<(&Observation, Option<(usize, usize)>)> = Vec::new();
        let observed = |obs: &Observation, when: &str, missing: usize| Observed {
            when: when.to_string(),
            events: obs.records.len(),
            missing,
            torn: obs.torn.clone(),
            damage: obs.damage.clone(),
        };
        let moment_of = |obs: &Observation| {
            moments
                .iter()
                .find(|m| std::ptr::eq(m.obs, obs))
                .map(|m| (m.when.clone(), check::lost_acks(h, m).len()))
                .unwrap_or_default()
        };
        for (i, life) in h.lives.iter().enumerate() {
            let mut rows = Vec::new();
            if let Some(r) = &life.recovered {
                rows.push(Row::Recovered {
                    appended: r.appended,
                    interrupted: r.interrupted.clone(),
                });
                rows.extend(r.uncertain.iter().map(|u| Row::Uncertain {
                    call: u.call_id.clone(),
                    phase: phase_name(u.phase),
                }));
            }
            if let Some(a) = &life.after_recovery {
                let (when, missing) = moment_of(a);
                placed.push((a, Some((i, rows.len()))));
                rows.push(Row::Observed(observed(a, &when, missing)));
            }
            if let Some(n) = life.recovered_again {
                rows.push(Row::RecoveredAgain { appended: n });
            }
            if let Some(b) = &life.after_second_recovery {
                let (when, missing) = moment_of(b);
                placed.push((b, Some((i, rows.len()))));
                rows.push(Row::Observed(observed(b, &when, missing)));
            }
            let crash = plan.crash_of(life.index);
            let went_on = matches!(crash, Some(Crash::Syscall { fault, .. }) if !fault.kills());
            // An injected error the process went on after sits between the
            // appends its stdout shows before and after it.
            let fault_at = life.syscalls.as_ref().and_then(|s| match &s.fault {
                Some(FaultReport {
                    outcome: FaultOutcome::Injected { .. },
                    stdout_before: Some(b),
                    ..
                }) if went_on => Some(*b),
                _ => None,
            });
            let acked_at: HashMap<usize, u64> = life
                .syscalls
                .iter()
                .flat_map(|s| s.acks.iter().copied())
                .collect();
            let mut fault_row = went_on.then(|| Row::Fault {
                text: match fault_at {
                    Some(_) => crashes.get(i).cloned().unwrap_or_default(),
                    None => format!(
                        "{} (the tracer did not place it among the appends)",
                        crashes.get(i).map_or("", String::as_str)
                    ),
                },
            });
            for (w, write) in life.writes.iter().enumerate() {
                if fault_at.is_some_and(|b| write.line >= b) {
                    rows.extend(fault_row.take());
                }
                // Sent before the injected error, acknowledged after it.
                let after_fault = match (fault_at, acked_at.get(&w)) {
                    (Some(b), Some(&line)) => write.line < b && line >= b,
                    _ => false,
                };
                let name = names.name(&write.fingerprint, &write.type_name);
                let (label, ack) = match (write.acked, write.refused) {
                    (Some(seq), _) if after_fault => {
                        (format!("seq {seq} {name}"), Ack::AckedAfterFault(seq))
                    }
                    (Some(seq), _) => (format!("seq {seq} {name}"), Ack::Acked(seq)),
                    (None, true) => (name, Ack::Refused),
                    (None, false) => (name, Ack::Never),
                };
                rows.push(Row::Append(Append {
                    label,
                    ack,
                    lost: None,
                }));
            }
            rows.extend(fault_row);
            match (life.end, crash) {
                (LifeEnd::Killed, Some(_)) if !went_on => rows.push(Row::Crash {
                    text: crashes.get(i).cloned().unwrap_or_default(),
                }),
                _ => rows.push(Row::End {
                    text: ended(life.end, life.done, &life.stderr),
                    clean: life.done,
                }),
            }
            if i == 0 {
                for (path, from, to) in &h.power_cut {
                    rows.push(Row::PowerCut {
                        text: format!(
                            "power cut: {} cut from {from} to {to} bytes (its unsynced tail)",
                            path.file_name().map_or_else(
                                || path.display().to_string(),
                                |n| { n.to_string_lossy().into_owned() }
                            )
                        ),
                    });
                }
            }
            if let Some(k) = h.after_kill.get(i) {
                let (when, missing) = moment_of(k);
                placed.push((k, Some((i, rows.len()))));
                rows.push(Row::Observed(observed(k, &when, missing)));
            }
            lanes.push(Lane {
                life: life.index,
                rows,
                world: Vec::new(),
            });
        }
        placed.push((&h.final_obs, None));
        // Every moment in the order it happened, each lost ack attached to
        // the first observation that misses it.
        for &(obs, at) in &placed {
            let Some(m) = moments.iter().find(|m| std::ptr::eq(m.obs, obs)) else {
                continue;
            };
            for l in check::lost_acks(h, m) {
                lost_at.entry((l.life, l.write)).or_insert(Lost {
                    at,
                    when: m.when.clone(),
                    holds: l.holds,
                });
            }
        }
        for ((life, write), lost) in lost_at {
            let appends = lanes[life].rows.iter_mut().filter_map(|r| match r {
                Row::Append(a) => Some(a),
                _ => None,
            });
            if let Some(a) = appends.into_iter().nth(write) {
                a.lost = Some(lost);
            }
        }
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for a in &h.world {
            *counts.entry(&a.id).or_default() += 1;
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for a in &h.world {
            let nth = seen.entry(&a.id).or_default();
            *nth += 1;
            let applied = Applied {
                operation: a.id.clone(),
                service: a.service.clone(),
                action: a.action.clone(),
                nth: *nth,
                of: counts[a.id.as_str()],
            };
            if let Some(lane) = lanes.iter_mut().find(|l| l.life == a.life) {
                lane.world.push(applied);
            }
        }
        let mut workspace = Vec::new();
        for (file, bytes) in &h.workspace {
            let text = String::from_utf8_lossy(bytes);
            let mut tags: BTreeMap<&str, usize> = BTreeMap::new();
            for line in text.lines() {
                if let Some(op) = tagged_operation(line) {
                    *tags.entry(op).or_default() += 1;
                }
            }
            workspace.extend(
                tags.into_iter()
                    .filter(|(_, n)| *n > 1)
                    .map(|(op, lines)| Tagged {
                        file: file.clone(),
                        operation: op.to_string(),
                        lines,
                    }),
            );
        }
        let (when, missing) = moment_of(&h.final_obs);
        Timeline {
            lives: lanes,
            end: observed(&h.final_obs, &when, missing),
            workspace,
        }
    }

    /// Acknowledged events the trial lost, each once.
    pub fn lost(&self) -> impl Iterator<Item = &Append> {
        self.lives
            .iter()
            .flat_map(|l| &l.rows)
            .filter_map(|r| match r {
                Row::Append(a) if a.lost.is_some() => Some(a),
                _ => None,
            })
    }

    /// World applications of operations applied more than once.
    pub fn repeated(&self) -> impl Iterator<Item = &Applied> {
        self.lives
            .iter()
            .flat_map(|l| &l.world)
            .filter(|a| a.repeated())
    }
}

/// How a life ended that no planned crash ended.
fn ended(end: LifeEnd, done: bool, stderr: &str) -> String {
    match end {
        LifeEnd::Exited(0) if done => "finished the scenario".to_string(),
        LifeEnd::Exited(c) if stderr.is_empty() => format!("exited with status {c}"),
        LifeEnd::Exited(c) => format!("exited with status {c}: {stderr}"),
        LifeEnd::Killed => "killed (SIGKILL)".to_string(),
        LifeEnd::Signaled(sig) => format!("died of signal {sig}"),
        LifeEnd::Hung => "hung: the watchdog killed it".to_string(),
    }
}

/// Events by fingerprint, from every log the trial observed and the
/// crash-free run's: an announcement only carries its type and fingerprint.
struct Names(HashMap<String, String>);

impl Names {
    fn of(h: &History, reference: &[Record]) -> Names {
        let mut names = HashMap::new();
        let observations = h
            .after_kill
            .iter()
            .chain(h.lives.iter().flat_map(|l| {
                l.after_recovery
                    .iter()
                    .chain(l.after_second_recovery.iter())
            }))
            .chain(std::iter::once(&h.final_obs));
        let records = observations
            .flat_map(|o| o.records.iter())
            .chain(reference.iter());
        for r in records {
            if let Some(e) = r.event() {
                names
                    .entry(fingerprint(e))
                    .or_insert_with(|| describe_event(e));
            }
        }
        Names(names)
    }

    fn name(&self, fingerprint: &str, type_name: &str) -> String {
        self.0
            .get(fingerprint)
            .cloned()
            .unwrap_or_else(|| type_name.to_string())
    }
}
