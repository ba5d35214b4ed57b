//! failed-sync-not-acked: after the syscall nemesis failed a write
//! (ENOSPC) or an fsync (EIO), nothing is acknowledged until the store has
//! written again and synced what it wrote (a file the store never syncs:
//! written again). The order of acks against the store's syscalls is the
//! tracer's, never the store's account.

use std::path::Path;

use crate::check::{v, Invariant, Violation};
use crate::history::{History, Life};
use crate::nemesis::powerloss::{LoggedOp, Op};
use crate::nemesis::syscall::{Call, FaultOutcome, SyscallFault};

/// The index in `oplog` of the store's write of the event the agent
/// announced with its stdout line at byte `line`: a write of a whole line
/// (ending in a newline: not pre-allocated zeros) that `writes` matches.
///
/// Announced alone, the event is written between its line and the
/// agent's next one: the last such write there. A pipelined batch
/// (`chaos/PROTOCOL.md`, section 10) is announced as a run of lines with
/// no such write between them, and written after the run's last line:
/// the run's i-th announcement is the i-th such write there.
fn line_written(
    oplog: &crate::nemesis::powerloss::OpLog,
    announced: &[u64],
    line: u64,
    writes: &dyn Fn(&Op) -> bool,
) -> Option<usize> {
    let outputs = &oplog.outputs;
    let k = outputs
        .iter()
        .position(|m| m.offset <= line && line < m.offset + m.len)?;
    // Whole-line writes from stdout write `from` to stdout write `to` (or the end).
    let written = |from: usize, to: Option<usize>| -> Vec<usize> {
        let end = to.map_or(oplog.ops.len(), |t| outputs[t].after_ops);
        (outputs[from].after_ops..end)
            .filter(|&i| {
                let op = &oplog.ops[i].op;
                writes(op) && matches!(op, Op::Write { data, .. } if data.0.last() == Some(&b'\n'))
            })
            .collect()
    };
    let next = |k: usize| (k + 1 < outputs.len()).then_some(k + 1);
    let announces = |k: usize| announced.contains(&outputs[k].offset);
    let (mut first, mut last) = (k, k);
    while first > 0 && announces(first - 1) && written(first - 1, Some(first)).is_empty() {
        first -= 1;
    }
    while next(last).is_some_and(announces) && written(last, next(last)).is_empty() {
        last += 1;
    }
    if first == last {
        return written(k, next(k)).last().copied();
    }
    // The batch may go out in parts, the schedule's answers between them.
    let next_announcement = (last + 1..outputs.len()).find(|&o| announces(o));
    written(last, next_announcement).get(k - first).copied()
}

/// failed-sync-not-acked: after the syscall nemesis made an fsync of file F
/// fail (EIO) in a life, no append is acknowledged until F is written
/// again and then synced; after it made a write fail (ENOSPC), none until
/// the store has written a file and then synced that file. A failed write
/// changed nothing on disk, so new durable progress in any file earns the
/// ack (a WAL store's failed checkpoint leaves its log authoritative: its
/// next commit writes and syncs the log, not the file the checkpoint
/// wrote); whether that progress holds the acked event is acked-durable's
/// question. A store that never syncs a file while the agent appends
/// (whatever it did when it created it) claims no more than the page cache
/// for it, and has no failed sync to acknowledge: its write to that file
/// after the failure earns the ack (the power-loss row judges what the
/// page cache loses). A failed fsync may have dropped F's
/// unsynced pages, so only F's own rewrite counts. An fsync that failed while F held no unsynced
/// write lost nothing and is not judged, nor one whose unsynced writes
/// each repeat the bytes of a synced write to another file (a WAL store's
/// checkpoint copying pages its log holds). The order of the agent's ack
/// lines against the store's syscalls is exact: the tracer places every
/// write to the agent's stdout between the recorded ops.
pub(super) fn failed_sync_not_acked(h: &History, out: &mut Vec<Violation>) {
    for life in &h.lives {
        failed_sync_not_acked_in(life, out);
    }
}

fn failed_sync_not_acked_in(life: &Life, out: &mut Vec<Violation>) {
    let Some(sys) = &life.syscalls else { return };
    let (Some(report), Some(oplog)) = (&sys.fault, &sys.oplog) else {
        return;
    };
    let (SyscallFault::Fail { errno }, FaultOutcome::Injected { event }, Some(before)) =
        (report.plan.fault, &report.outcome, report.stdout_before)
    else {
        return;
    };
    let (path, is_sync) = match &event.call {
        Call::Write { path, .. } => (path, false),
        Call::Sync { path, .. } => (path, true),
        _ => return,
    };
    let Ok(file) = path.strip_prefix(&sys.root) else {
        return;
    };
    let at = event.index;
    let writes = |op: &Op| matches!(op, Op::Write { path, .. } if path == file);
    let syncs_file = |op: &Op, file: &Path| match op {
        Op::Fsync { path } | Op::Fdatasync { path } => path == file,
        Op::SyncAll => true,
        _ => false,
    };
    let syncs = |op: &Op| syncs_file(op, file);
    let origin = |o: &LoggedOp| o.origin.map(|g| g.syscall);
    if is_sync {
        let before_failure: Vec<&LoggedOp> = oplog
            .ops
            .iter()
            .filter(|o| origin(o).is_some_and(|i| i < at))
            .collect();
        // F's writes since its last sync: what the kernel may have dropped.
        let mut dirty: Vec<&[u8]> = Vec::new();
        for o in &before_failure {
            match &o.op {
                Op::Write { path, data, .. } if path == file => dirty.push(&data.0),
                op if syncs(op) => dirty.clear(),
                _ => {}
            }
        }
        // Bytes a synced write to another file already holds are not lost
        // with F's pages: a WAL store's checkpoint copies pages its log
        // holds, and the log stays authoritative until F is synced.
        let synced_elsewhere = |bytes: &[u8]| {
            before_failure.iter().enumerate().any(|(i, o)| match &o.op {
                Op::Write { path, data, .. } if path != file && data.0 == bytes => before_failure
                    [i + 1..]
                    .iter()
                    .any(|later| syncs_file(&later.op, path)),
                _ => false,
            })
        };
        if dirty.iter().all(|bytes| synced_elsewhere(bytes)) {
            return;
        }
    }
    // A file the store never syncs while the agent appends (from the
    // agent's first line on, after the open: a store may sync the file it
    // creates and never again) is kept in the page cache, all the store
    // claims for it (the power row judges that claim): after a failed
    // write, its next write earns the ack.
    let appending = oplog.outputs.first().map_or(0, |m| m.after_ops);
    let never_synced = |path: &Path| {
        !oplog.ops[appending.min(oplog.ops.len())..]
            .iter()
            .any(|o| syncs_file(&o.op, path))
    };
    let root = sys.root.display().to_string();
    let text = |e: &crate::nemesis::syscall::SyscallEvent| e.to_string().replace(&root, "ROOT");
    let announced: Vec<u64> = life.writes.iter().map(|w| w.line).collect();
    for &(w, offset) in &sys.acks {
        if offset < before {
            continue;
        }
        let after_ops = oplog
            .outputs
            .iter()
            .find(|m| m.offset <= offset && offset < m.offset + m.len)
            .map_or(oplog.ops.len(), |m| m.after_ops);
        let between: Vec<&LoggedOp> = oplog.ops[..after_ops]
            .iter()
            .filter(|o| origin(o).is_some_and(|i| i > at))
            .collect();
        let rewritten = between.iter().enumerate().any(|(i, o)| match &o.op {
            Op::Write { path, .. } if path == file || !is_sync => {
                (!is_sync && never_synced(path))
                    || between[i + 1..]
                        .iter()
                        .any(|later| syncs_file(&later.op, path))
            }
            _ => false,
        });
        // An event of a parallel group whose line was written whole before
        // the failure is acknowledged after it, with the rest of its group.
        // After a failed write it is due its ack once any sync covers it
        // (at once, in a file the store never syncs); after a failed sync,
        // only if a sync before the failure did.
        let synced_before = line_written(oplog, &announced, life.writes[w].line, &writes)
            .filter(|&i| origin(&oplog.ops[i]).is_some_and(|o| o < at))
            .is_some_and(|i| {
                (!is_sync && never_synced(file))
                    || oplog.ops[i + 1..after_ops]
                        .iter()
                        .any(|o| syncs(&o.op) && (!is_sync || origin(o).is_some_and(|g| g < at)))
            });
        if rewritten || synced_before {
            continue;
        }
        let upto = between.iter().filter_map(|o| origin(o)).max().unwrap_or(at);
        let calls: Vec<String> = sys
            .events
            .iter()
            .filter(|e| e.index > at && e.index <= upto)
            .map(text)
            .collect();
        let write = &life.writes[w];
        let seq = write.acked.unwrap_or_default();
        let call = format!("#{at} {}", event.call_text().replace(&root, "ROOT"));
        out.push(v(
            Invariant::FailedSyncNotAcked,
            &format!("in life {}, after the injected error", life.index),
            if is_sync {
                format!(
                    "no acknowledgement after {call} failed with {errno} until ROOT/{} is written again and synced (the kernel may have dropped its unsynced pages: a retried fsync proves nothing)",
                    file.display()
                )
            } else if never_synced(file) {
                format!(
                    "no acknowledgement after {call} failed with {errno} until the store writes again (the write never happened; the store never syncs ROOT/{}, so a write is all it claims)",
                    file.display()
                )
            } else {
                format!(
                    "no acknowledgement after {call} failed with {errno} until the store writes again and syncs the file it wrote (the write never happened)"
                )
            },
            format!(
                "{} at seq {seq} was acknowledged; in between: {}",
                write.type_name,
                if calls.is_empty() {
                    "no store syscall".to_string()
                } else {
                    calls.join(", ")
                }
            ),
            vec![format!("{call} failed with {errno}"), format!("ack of seq {seq} {}", write.type_name)],
        ));
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::check::fixture::history;

    /// Life 0 wrote the log (#0), its fdatasync failed with EIO (#1), then
    /// the store made `after` (as ops at #2, #3, …) and acknowledged.
    fn eio_then(after: Vec<Op>) -> History {
        fail_then(Failed::Fdatasync, after)
    }

    /// Which of life 0's syscall #1 the nemesis failed.
    enum Failed {
        /// An fdatasync of the log, with EIO.
        Fdatasync,
        /// A write (a checkpoint's) of `s/session.db`, with ENOSPC.
        CheckpointWrite,
        /// A write of the log, with ENOSPC.
        LogWrite,
    }

    /// Life 0 wrote the log (#0), syscall #1 failed, then the store made
    /// `after` (as ops at #2, #3, …) and acknowledged.
    fn fail_then(failed: Failed, after: Vec<Op>) -> History {
        use crate::nemesis::powerloss::{Bytes, OpLog, Origin, OutputMark};
        use crate::nemesis::syscall::{Errno, FaultPlan, FaultReport, SyscallEvent, Sysno};
        let log = std::path::PathBuf::from("/r/s/events.jsonl");
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let (sysno, call, errno) = match failed {
            Failed::Fdatasync => (
                Sysno::Fdatasync,
                Call::Sync {
                    fd: 4,
                    path: log.clone(),
                    data_only: true,
                },
                Errno::EIO,
            ),
            Failed::CheckpointWrite => (
                Sysno::Pwrite64,
                Call::Write {
                    fd: 5,
                    path: "/r/s/session.db".into(),
                    len: 4096,
                    offset: Some(8192),
                },
                Errno::ENOSPC,
            ),
            Failed::LogWrite => (
                Sysno::Write,
                Call::Write {
                    fd: 4,
                    path: log.clone(),
                    len: 5,
                    offset: None,
                },
                Errno::ENOSPC,
            ),
        };
        let failed = SyscallEvent {
            index: 1,
            pid: 1,
            sysno,
            call,
            result: Some(-i64::from(errno.get())),
        };
        let write = Op::Write {
            path: rel,
            offset: 0,
            data: Bytes(b"line\n".to_vec()),
        };
        let ops: Vec<LoggedOp> = std::iter::once(write)
            .chain(after)
            .enumerate()
            .map(|(i, op)| LoggedOp {
                op,
                origin: Some(Origin {
                    pid: 1,
                    syscall: if i == 0 { 0 } else { i as u64 + 1 },
                }),
            })
            .collect();
        let mut h = history(true);
        h.lives[0].syscalls = Some(crate::history::SyscallLife {
            root: "/r".into(),
            events: vec![failed.clone()],
            reads: Vec::new(),
            fault: Some(FaultReport {
                plan: FaultPlan {
                    at: 1,
                    fault: SyscallFault::Fail { errno },
                },
                outcome: FaultOutcome::Injected { event: failed },
                stdout_before: Some(40),
            }),
            oplog: Some(OpLog {
                outputs: vec![OutputMark {
                    after_ops: ops.len(),
                    offset: 40,
                    len: 30,
                    pid: 1,
                }],
                ops,
                gaps: vec![],
            }),
            acks: vec![(0, 40)],
            stops: 0,
        });
        h
    }

    /// The failed-sync-not-acked violations the checker finds in `h`.
    fn failed_sync(h: &History) -> Vec<Violation> {
        check(h, None)
            .into_iter()
            .filter(|v| v.invariant == Invariant::FailedSyncNotAcked)
            .collect()
    }

    /// Life 0's recorded file operations and stdout marks.
    fn oplog_of(h: &mut History) -> &mut crate::nemesis::powerloss::OpLog {
        h.lives[0]
            .syscalls
            .as_mut()
            .unwrap()
            .oplog
            .as_mut()
            .unwrap()
    }

    /// [`eio_then`]`(after)` with `ops` inserted at `index` of life 0's
    /// ops, all made before the failed call, and the ack printed after them.
    fn eio_with(index: usize, ops: Vec<Op>, after: Vec<Op>) -> History {
        use crate::nemesis::powerloss::Origin;
        let mut h = eio_then(after);
        let oplog = oplog_of(&mut h);
        for (i, op) in ops.into_iter().enumerate() {
            let origin = Some(Origin { pid: 1, syscall: 0 });
            oplog.ops.insert(index + i, LoggedOp { op, origin });
        }
        oplog.outputs[0].after_ops = oplog.ops.len();
        h
    }

    #[test]
    fn failed_sync_not_acked_catches_a_retried_fsync_and_lets_a_rewrite_pass() {
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let mut h = eio_then(vec![Op::Fdatasync { path: rel.clone() }]);
        // The retry (#2) as the tracer saw it, succeeding.
        let sys = h.lives[0].syscalls.as_mut().unwrap();
        let mut retry = sys.events[0].clone();
        retry.index = 2;
        retry.result = Some(0);
        sys.events.push(retry);
        let v = failed_sync(&h);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert!(
            v[0].found.starts_with(
                "run_started at seq 1 was acknowledged; in between: #2 fdatasync(fd 4 = ROOT/s/events.jsonl) = 0"
            ),
            "the calls between the failure and the ack: {:?}",
            v[0]
        );
        let rewritten = vec![
            Op::Write {
                path: rel.clone(),
                offset: 0,
                data: crate::nemesis::powerloss::Bytes(b"line\n".to_vec()),
            },
            Op::Fdatasync { path: rel },
        ];
        assert_eq!(
            check(&eio_then(rewritten), None),
            vec![],
            "a rewrite + sync passes"
        );
    }

    /// Only F's writes since its last sync are at stake when its fsync
    /// fails: a log synced before (by fdatasync or sync()) and left clean,
    /// or followed only by another file's write, loses nothing and a
    /// retried fsync is not judged; a write to F is still at stake after
    /// another file's write.
    #[test]
    fn failed_sync_not_acked_judges_only_the_writes_a_failed_fsync_may_drop() {
        use crate::nemesis::powerloss::Bytes;
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let other = |path: &str| Op::Write {
            path: path.into(),
            offset: 0,
            data: Bytes(b"other\n".to_vec()),
        };
        // Life 0's write of the log (#0), then `ops` (also before the
        // failure), then the failed fdatasync, a retry and the ack.
        let judged = |ops: Vec<Op>| {
            failed_sync(&eio_with(1, ops, vec![Op::Fdatasync { path: rel.clone() }])).len()
        };
        assert_eq!(judged(vec![]), 1, "the log's line was at stake");
        assert_eq!(judged(vec![Op::Fdatasync { path: rel.clone() }]), 0);
        assert_eq!(judged(vec![Op::SyncAll]), 0);
        assert_eq!(
            judged(vec![Op::Fdatasync { path: rel.clone() }, other("s/index")]),
            0,
            "another file's write does not make the log dirty"
        );
        assert_eq!(
            judged(vec![other("s/index")]),
            1,
            "another file's write does not clean the log"
        );
    }

    /// Each ack is judged by what came before it: one printed before the
    /// failure is not judged; a rewrite and sync after the ack does not
    /// earn it, nor (after a failed fsync) another file's write and sync.
    #[test]
    fn failed_sync_not_acked_judges_each_ack_by_what_came_before_it() {
        use crate::nemesis::powerloss::{Bytes, Origin};
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let judged = |h: &History| failed_sync(h).len();
        let mut acked_before = eio_then(vec![]);
        let mut earlier = acked_before.lives[0].writes[0].clone();
        earlier.acked = Some(7);
        acked_before.lives[0].writes.push(earlier);
        let sys = acked_before.lives[0].syscalls.as_mut().unwrap();
        sys.acks.insert(0, (1, 10));
        // One violation per failed call: it must name the ack after it.
        let found: Vec<String> = failed_sync(&acked_before)
            .into_iter()
            .map(|v| v.found)
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("run_started at seq 1 was acknowledged"),
            "only the ack after the failure: {found:?}"
        );

        let mut rewritten_late = eio_then(vec![]);
        let oplog = oplog_of(&mut rewritten_late);
        let rewrite = [
            Op::Write {
                path: rel.clone(),
                offset: 0,
                data: Bytes(b"line\n".to_vec()),
            },
            Op::Fdatasync { path: rel.clone() },
        ];
        for (i, op) in rewrite.into_iter().enumerate() {
            let origin = Some(Origin {
                pid: 1,
                syscall: 2 + i as u64,
            });
            oplog.ops.push(LoggedOp { op, origin });
        }
        assert_eq!(judged(&rewritten_late), 1, "the rewrite came after the ack");

        let wal = std::path::PathBuf::from("s/events.wal");
        let elsewhere = eio_then(vec![
            Op::Write {
                path: wal.clone(),
                offset: 0,
                data: Bytes(b"frame".to_vec()),
            },
            Op::Fsync { path: wal },
        ]);
        assert_eq!(
            judged(&elsewhere),
            1,
            "after EIO only the file's own rewrite"
        );

        // A line the agent printed (at byte 20) before the rewrite does not
        // move the ack (at byte 40) before it.
        let mut printed_between = eio_then(vec![
            Op::Write {
                path: rel.clone(),
                offset: 0,
                data: Bytes(b"line\n".to_vec()),
            },
            Op::Fdatasync { path: rel },
        ]);
        oplog_of(&mut printed_between).outputs.insert(
            0,
            crate::nemesis::powerloss::OutputMark {
                after_ops: 1,
                offset: 20,
                len: 20,
                pid: 1,
            },
        );
        assert_eq!(judged(&printed_between), 0, "rewritten before the ack");
    }

    /// A parallel group: event A's line written (announced at byte 0 of
    /// the agent's stdout), then B's (announced at byte 20), then the log's
    /// fdatasync fails and A is acknowledged (at byte 40). A synced before
    /// the failure passes; synced only by the retry, it does not.
    #[test]
    fn failed_sync_not_acked_lets_a_group_event_synced_before_a_failed_fsync_pass() {
        use crate::nemesis::powerloss::{Bytes, OutputMark};
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let group = |a_synced_first: bool| {
            let mut before_b = vec![];
            if a_synced_first {
                before_b.push(Op::Fdatasync { path: rel.clone() });
            }
            let b_at = 1 + before_b.len();
            before_b.push(Op::Write {
                path: rel.clone(),
                offset: 5,
                data: Bytes(b"b\n".to_vec()),
            });
            let retry = vec![Op::Fdatasync { path: rel.clone() }];
            let mut h = eio_with(1, before_b, retry);
            let oplog = oplog_of(&mut h);
            let mark = |after_ops: usize, offset: u64| OutputMark {
                after_ops,
                offset,
                len: 20,
                pid: 1,
            };
            oplog.outputs.insert(0, mark(b_at, 20));
            oplog.outputs.insert(0, mark(0, 0));
            failed_sync(&h).len()
        };
        assert_eq!(group(true), 0);
        assert_eq!(group(false), 1);
    }

    /// A failed fsync of a file whose unsynced bytes a synced log already
    /// holds (a WAL store's checkpoint) lost nothing: a retried fsync is
    /// then not judged. Unsynced in the log, other bytes in the log, or the
    /// same bytes earlier in the file itself (a second copy is a second
    /// line), it is.
    #[test]
    fn failed_sync_not_acked_lets_pass_a_failed_fsync_of_bytes_synced_elsewhere() {
        use crate::nemesis::powerloss::Bytes;
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let wal = std::path::PathBuf::from("s/events.wal");
        // `bytes` written to `path` (and synced) before life 0's write of
        // the log, whose fdatasync then fails and is retried.
        let copied_to = |path: &std::path::Path, bytes: &[u8], synced: bool| {
            let mut first = vec![Op::Write {
                path: path.to_path_buf(),
                offset: 0,
                data: Bytes(bytes.to_vec()),
            }];
            if synced {
                first.push(Op::Fsync {
                    path: path.to_path_buf(),
                });
            }
            let retry = vec![Op::Fdatasync { path: rel.clone() }];
            failed_sync(&eio_with(0, first, retry)).len()
        };
        assert_eq!(copied_to(&wal, b"line\n", true), 0);
        assert_eq!(copied_to(&wal, b"line\n", false), 1);
        assert_eq!(copied_to(&wal, b"other\n", true), 1);
        assert_eq!(copied_to(&rel, b"line\n", true), 1);
    }

    /// After a checkpoint's write failed, a WAL store's commit writes and
    /// syncs its log, not the file the checkpoint wrote: that earns the
    /// ack. A write nothing synced does not, nor a sync of another file.
    #[test]
    fn failed_sync_not_acked_lets_a_failed_write_be_followed_by_a_synced_write_elsewhere() {
        let wal = std::path::PathBuf::from("s/session.db-wal");
        let frame = || Op::Write {
            path: wal.clone(),
            offset: 0,
            data: crate::nemesis::powerloss::Bytes(b"frame".to_vec()),
        };
        let failed = |after: Vec<Op>| failed_sync(&fail_then(Failed::CheckpointWrite, after));
        assert_eq!(
            failed(vec![frame(), Op::Fsync { path: wal.clone() }]),
            vec![],
            "the log written and synced after the failed checkpoint"
        );
        // The store syncs its log and its database, later in the life: not
        // before this ack.
        let mut h = fail_then(Failed::CheckpointWrite, vec![frame()]);
        for (i, path) in [wal.clone(), "s/session.db".into()].into_iter().enumerate() {
            oplog_of(&mut h).ops.push(LoggedOp {
                op: Op::Fsync { path },
                origin: Some(crate::nemesis::powerloss::Origin {
                    pid: 1,
                    syscall: 9 + i as u64,
                }),
            });
        }
        let unsynced = failed_sync(&h);
        assert_eq!(unsynced.len(), 1, "{unsynced:#?}");
        assert!(
            unsynced[0].expected.contains(
                "failed with ENOSPC until the store writes again and syncs the file it wrote"
            ),
            "{:?}",
            unsynced[0]
        );
        let mut h = fail_then(
            Failed::CheckpointWrite,
            vec![
                frame(),
                Op::Fsync {
                    path: "s/session.db".into(),
                },
            ],
        );
        oplog_of(&mut h).ops.push(LoggedOp {
            op: Op::Fsync { path: wal.clone() },
            origin: Some(crate::nemesis::powerloss::Origin { pid: 1, syscall: 9 }),
        });
        let other_synced = failed_sync(&h);
        assert_eq!(other_synced.len(), 1, "{other_synced:#?}");
    }

    /// A store that never syncs its log (the page cache is all it claims
    /// for it) has no failed sync to acknowledge: after a failed write of
    /// the log, its next write of it earns the ack; an ack with no write
    /// in between does not. A log synced while the agent appends is a
    /// synced file: its rewrite must be synced before the ack.
    #[test]
    fn failed_sync_not_acked_judges_a_store_that_never_syncs_by_its_writes() {
        use crate::nemesis::powerloss::{Bytes, Origin};
        let rel = std::path::PathBuf::from("s/events.jsonl");
        let rewrite = || Op::Write {
            path: rel.clone(),
            offset: 0,
            data: Bytes(b"line\n".to_vec()),
        };
        let failed = |after: Vec<Op>| failed_sync(&fail_then(Failed::LogWrite, after));
        assert_eq!(
            failed(vec![rewrite()]),
            vec![],
            "written again, never synced"
        );
        let acked_alone = failed(vec![]);
        assert_eq!(acked_alone.len(), 1, "{acked_alone:#?}");
        assert!(
            acked_alone[0].expected.contains(
                "until the store writes again (the write never happened; the store never syncs ROOT/s/events.jsonl"
            ),
            "{:?}",
            acked_alone[0]
        );
        // Synced once, when created (before the agent's first line): still
        // a file the store keeps in the page cache.
        let mut created_synced = fail_then(Failed::LogWrite, vec![rewrite()]);
        let oplog = oplog_of(&mut created_synced);
        let origin = Some(Origin { pid: 1, syscall: 0 });
        let sync = Op::Fdatasync { path: rel.clone() };
        oplog.ops.insert(1, LoggedOp { op: sync, origin });
        oplog.outputs[0].after_ops = oplog.ops.len();
        let first_line = crate::nemesis::powerloss::OutputMark {
            after_ops: 2,
            offset: 0,
            len: 20,
            pid: 1,
        };
        oplog.outputs.insert(0, first_line);
        assert_eq!(failed_sync(&created_synced), vec![]);
        // The same store, but one that syncs its log after the ack.
        let mut syncs_later = fail_then(Failed::LogWrite, vec![rewrite()]);
        oplog_of(&mut syncs_later).ops.push(LoggedOp {
            op: Op::Fdatasync { path: rel.clone() },
            origin: Some(Origin { pid: 1, syscall: 9 }),
        });
        let v = failed_sync(&syncs_later);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert!(
            v[0].expected
                .contains("until the store writes again and syncs the file it wrote"),
            "{:?}",
            v[0]
        );
    }
}
