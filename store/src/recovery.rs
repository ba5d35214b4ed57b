//! Recovery: telling the next process, from disk alone, what really happened.
//!
//! [`Session::recover`] closes every run without a finish (`run_interrupted`)
//! and marks every tool call without a result exactly once
//! (`tool_recovery { status: uncertain, phase }`), where the phase says how
//! far it got: `requested` (never started: safe to run), `started` (intent
//! durable, outcome unknown: reconcile by operation id first), `committed`
//! (the effect happened, the result was lost: never run again).
//!
//! Each mark is its own durable append, so a crash in the middle leaves a
//! prefix of the marks; the next recovery adds only what is missing. A
//! second recovery appends nothing. The torn tail was already cut when the
//! session was opened.
//!
//! What verifies what: opening for writing (`Session::open`, `repair`, the
//! CLI's `append`) verifies every line after the snapshot it trusts, and
//! trusts the prefix the snapshot covers (checked only at its boundary), so
//! resuming stays O(tail). Recovery trusts nothing: before it appends
//! anything it verifies every line of the log from the start (frame,
//! checksum, seq, id), so damage under a snapshot stops it with line and
//! byte offset instead of being hidden behind the snapshot. `fsck` verifies
//! every line too and never writes.

pub use agentchaos_protocol::message::{RecoveryState, TornTailReport, UncertainCall};

use crate::crashpoint;
use crate::error::Result;
use crate::event::{Event, Phase, RecoveryStatus};
use crate::fault::{self, Fault};
use crate::projection::OpenCall;
use crate::scan::TornTail;
use crate::session::Session;

/// The uncertain-call report of `call`, marked with `phase`.
fn uncertain_call(call: &OpenCall, phase: Phase) -> UncertainCall {
    UncertainCall {
        call_id: call.call_id.clone(),
        tool: call.tool.clone(),
        target: call.target.clone(),
        phase,
        effect: call.effect,
        operation_id: call.operation_id.clone(),
        args: call.args.clone(),
        external_ref: call.committed.clone(),
    }
}

impl From<&TornTail> for TornTailReport {
    fn from(t: &TornTail) -> Self {
        TornTailReport {
            offset: t.offset,
            len: t.len,
            line: t.line,
            reason: t.reason.clone(),
            quarantine: t.quarantine.as_ref().map(|q| q.display().to_string()),
        }
    }
}

impl Session {
    /// Recovers the session after a crash (idempotent, crash-safe).
    pub fn recover(&mut self) -> Result<RecoveryState> {
        self.fenced(Session::recover_unfenced)
    }

    fn recover_unfenced(&mut self) -> Result<RecoveryState> {
        crashpoint::hit("recovery.begin");
        self.verify_whole_log()?;
        let mut appended = 0;
        if let Some(run_id) = self.projection().open_run().map(str::to_string) {
            crashpoint::hit("recovery.interrupt_run");
            self.append(Event::RunInterrupted { run_id })?;
            appended += 1;
        }
        let mark_all = fault::active(Fault::MarkTwice);
        let lie_about_phase = fault::active(Fault::RerunUncertain);
        let mut to_mark: Vec<(u64, String, Phase)> = self
            .projection()
            .open_calls()
            .values()
            .filter(|c| c.recovery.is_none() || mark_all)
            .map(|c| {
                // rerun-uncertain: broken on purpose, every call claims it never started.
                let phase = if lie_about_phase {
                    Phase::Requested
                } else {
                    c.phase()
                };
                (c.seq, c.call_id.clone(), phase)
            })
            .collect();
        to_mark.sort();
        for (_, call_id, phase) in to_mark {
            crashpoint::hit("recovery.mark");
            let event = Event::ToolRecovery {
                call_id,
                status: RecoveryStatus::Uncertain,
                phase,
            };
            if mark_all {
                // Skip the rule that refuses a second mark: that is the fault.
                self.append_unchecked(event)?;
            } else {
                self.append(event)?;
            }
            appended += 1;
        }
        crashpoint::hit("recovery.end");
        let projection = self.projection();
        Ok(RecoveryState {
            repaired: self.repaired_on_open().map(TornTailReport::from),
            interrupted_runs: projection.interrupted_runs().to_vec(),
            uncertain: projection
                .uncertain_calls()
                .into_iter()
                .map(|c| uncertain_call(c, c.recovery.unwrap_or(c.phase())))
                .collect(),
            appended,
        })
    }
}
