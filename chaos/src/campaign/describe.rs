//! A crash in plain words: where a plan's faults landed (which crash point,
//! which syscall of which life, what a tear kept), for reports and
//! replays. It describes; it must never judge.

use crate::campaign::prepare::Prepared;

use crate::history::History;
use crate::model::describe_record;
use crate::nemesis::syscall::{FaultOutcome, FaultReport};
use crate::nemesis::{
    Crash, Plan, SysFault, SyscallTrace, TracedCall, ADAPTER_APPEND, ADAPTER_APPEND_REPLIED,
    LOG_WRITE,
};

/// The syscall (or read) a fault in life `life` targets, as the crash-free
/// traced run saw it; for a trial, as the fault report says it really was.
fn syscall_text(
    life: u32,
    at: u64,
    fault: SysFault,
    syscalls: Option<&SyscallTrace>,
    history: Option<&History>,
) -> String {
    let injected = history
        .and_then(|h| h.lives.get(life as usize))
        .and_then(|l| l.syscalls.as_ref())
        .and_then(|s| match &s.fault {
            Some(FaultReport {
                outcome: FaultOutcome::Injected { event },
                ..
            }) => Some(TracedCall::new(event, &s.root).text),
            _ => None,
        });
    let n = syscalls.map_or(0, |t| t.counted(fault).len());
    let counts = fault.to_syscall().counts();
    if fault == SysFault::DiskFull {
        // Not one call: the first that needs space from `at` on, wherever it is.
        let of = syscalls.map(|_| format!(" of {n}")).unwrap_or_default();
        let first = injected.map_or_else(
            || " (no call needed space after it)".to_string(),
            |c| format!(" (the first call it failed: {c})"),
        );
        return format!("{counts} {at}{of}{first}");
    }
    let call = injected
        .or_else(|| {
            syscalls
                .and_then(|t| t.target(fault, at))
                .map(|c| c.text.clone())
        })
        .unwrap_or_else(|| format!("beyond the {n} {counts}s of the traced run"));
    format!("{counts} {at} of {n}: {call}")
}

/// Did a syscall fault land on the call the traced run had at its index?
/// `None` when it did (or the plan is not a syscall plan); else why not.
pub fn syscall_mismatch(plan: &Plan, prepared: &Prepared, h: &History) -> Option<String> {
    let (life, at, fault) = plan.syscall_fault()?;
    if fault == SysFault::DiskFull {
        // It fails whichever calls need space from `at` on: no one call to match.
        return None;
    }
    let sys = h.lives.get(life as usize)?.syscalls.as_ref()?;
    let Some(FaultReport {
        outcome: FaultOutcome::Injected { event },
        ..
    }) = &sys.fault
    else {
        return None;
    };
    let hit = TracedCall::new(event, &sys.root);
    let planned = prepared
        .syscalls_for(plan)
        .and_then(|t| t.target(fault, at));
    let counts = fault.to_syscall().counts();
    match planned {
        Some(p) if p.key == hit.key => None,
        Some(p) => Some(format!(
            "the fault planned for {counts} {at} of life {life}, {}, landed on {} (the store's {counts}s are not the same from run to run: several threads or processes racing?)",
            p.text, hit.text
        )),
        None => Some(format!(
            "the fault planned for {counts} {at} of life {life} landed on {}, which the traced run never made",
            hit.text
        )),
    }
}

/// Where, in words, a plan crashes the agent, life by life.
pub fn describe_crash(plan: &Plan, prepared: &Prepared, history: Option<&History>) -> String {
    let mut lives = describe_crashes(plan, prepared, history).into_iter();
    let mut s = lives.next().unwrap_or_default();
    for (life, text) in lives.enumerate() {
        s.push_str(&format!("; restarted life {}: {text}", life + 1));
    }
    s
}

/// What the plan does to each life it crashes, in words: the first life's
/// crash (or "none (the crash-free run)"), then each restarted life's.
pub fn describe_crashes(
    plan: &Plan,
    prepared: &Prepared,
    history: Option<&History>,
) -> Vec<String> {
    let trace = &prepared.trace;
    let reference = &prepared.reference.records;
    let point = |h: u64| -> String {
        let Some(name) = trace.hits.get(h as usize) else {
            return format!("hit {h} (beyond the {} hits of the trace)", trace.len());
        };
        let k = trace.appends_before[h as usize];
        let rec = |i: usize| {
            reference
                .get(i)
                .map(describe_record)
                .unwrap_or_else(|| format!("seq {i}"))
        };
        let context = if name == LOG_WRITE || name == ADAPTER_APPEND {
            format!("appending {}", rec(k))
        } else if name == ADAPTER_APPEND_REPLIED && k > 0 {
            format!("the adapter has answered the append of {}", rec(k - 1))
        } else if name == "log.fdatasync" && k > 0 {
            format!("syncing {}", rec(k - 1))
        } else if k > 0 {
            format!("after {}", rec(k - 1))
        } else {
            "before the first event".to_string()
        };
        format!("hit {h} of {}: {name} ({context})", trace.len())
    };
    let first = match plan.crash {
        None => "none (the crash-free run)".to_string(),
        Some(Crash::Kill { at }) => format!("SIGKILL at {}", point(at)),
        Some(Crash::Tear { at, bytes }) => {
            format!("{} at {}, then SIGKILL", torn(bytes), point(at))
        }
        Some(Crash::PowerCut { at }) => format!(
            "SIGKILL at {}, then a power cut (the log's unsynced tail dropped)",
            point(at)
        ),
        Some(Crash::Timer { micros }) => {
            let last = history
                .and_then(|h| h.lives.first())
                .and_then(|l| l.trace.as_deref())
                .and_then(|t| {
                    let n = t.lines().count();
                    t.lines()
                        .last()
                        .map(|l| format!("; last crash point passed: hit {} {l}", n - 1))
                })
                .unwrap_or_default();
            format!("SIGKILL by timer after {micros} µs{last}")
        }
        Some(Crash::Syscall { at, fault }) => sys_fault_text(
            fault,
            &syscall_text(0, at, fault, prepared.syscalls.as_ref(), history),
        ),
    };
    let mut lives = vec![first];
    for life in 1..=plan.later.len() as u32 {
        let Some(crash) = plan.crash_of(life) else {
            break;
        };
        let later = prepared.later_of(plan.prefix(life as usize));
        // In its recovery: before it reported its recovery (as the trial
        // saw it), or at a hit before the traced life's last recovery hit.
        let in_recovery = |at: u64| {
            history
                .and_then(|h| h.lives.get(life as usize))
                .map(|l| l.recovered_again.is_none())
                .or_else(|| {
                    later.and_then(|t| {
                        let last = t.hits.iter().rposition(|h| h.contains("recover"))?;
                        Some(at as usize <= last)
                    })
                })
        };
        let point = |at: u64| {
            let name = later
                .and_then(|t| {
                    t.hits
                        .get(at as usize)
                        .map(|n| format!(" of {}: {n}", t.hits.len()))
                })
                .unwrap_or_default();
            let phase = match in_recovery(at) {
                Some(true) => " (in its recovery)",
                Some(false) => " (after its recovery)",
                None => "",
            };
            format!("its hit {at}{name}{phase}")
        };
        let text = match crash {
            Crash::Kill { at } => format!("killed at {}", point(at)),
            Crash::Tear { at, bytes } => format!("{} at {}, then killed", torn(bytes), point(at)),
            Crash::Syscall { at, fault } => sys_fault_text(
                fault,
                &syscall_text(
                    life,
                    at,
                    fault,
                    later.and_then(|t| t.syscalls.as_ref()),
                    history,
                ),
            ),
            Crash::PowerCut { .. } | Crash::Timer { .. } => {
                unreachable!("the plan parser refuses {crash} in a restarted life")
            }
        };
        lives.push(text);
    }
    lives
}

fn torn(bytes: u64) -> String {
    if bytes >= u64::from(u32::MAX) {
        "torn write (all but the last byte)".to_string()
    } else {
        format!("torn write (first {bytes} bytes)")
    }
}

fn sys_fault_text(fault: SysFault, call: &str) -> String {
    match fault {
        SysFault::KillBefore => format!("SIGKILL before {call}"),
        SysFault::KillAfter => format!("SIGKILL after {call}"),
        SysFault::Tear { bytes } => {
            format!("torn write (first {bytes} bytes), then SIGKILL, at {call}")
        }
        SysFault::Enospc => format!("ENOSPC injected at {call}; the process went on"),
        SysFault::Eio => format!("EIO injected at {call}; the process went on"),
        SysFault::DiskFull => format!(
            "the disk full from {call} to the end of the life (ENOSPC at every write, creating open and mkdir); the process went on"
        ),
        SysFault::EioRead => format!("EIO injected at {call}; the process went on"),
        SysFault::EintrRead => format!("EINTR injected at {call}; the process went on"),
        SysFault::ShortRead { bytes } => {
            format!("a short read (its first {bytes} bytes only) at {call}; the process went on")
        }
    }
}
