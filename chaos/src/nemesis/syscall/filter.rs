//! Linux x86_64: the seccomp-bpf filter that makes the kernel stop a traced
//! process only at the calls the decoder handles (`SECCOMP_RET_TRACE`) and
//! run every other call without a stop (`SECCOMP_RET_ALLOW`), as
//! `strace --seccomp-bpf` does. An interpreter makes thousands of calls
//! while it imports (stat, openat for reading, read, mmap) that the
//! nemesis never counts; each cost two ptrace stops.
//!
//! Built from the decoder's own list ([`decode::DECODED`]); the open
//! family is stopped at only with [`decode::COUNTED_OPEN_FLAGS`], exactly
//! the opens the decoder counts. The reads ([`decode::READS`]) are in it
//! only when reads are traced: a process whose plan cannot fault a read
//! runs its reads (an interpreter's imports) without a stop. The BPF is compiled by `seccompiler`; it
//! checks the architecture first: a call made through another ABI (i386's
//! `int 0x80` from an x86_64 process, whose numbers the decoder would
//! misread) kills the process instead of running unseen.
//!
//! Installed in the child between fork and exec, after PTRACE_TRACEME; the
//! tracer reads `/proc/PID/status` after the exec to know whether it took
//! (it can be missing from a kernel or forbidden by a container's own
//! filter) and otherwise stops at every call, as without the filter.
//! Inherited by every child and thread, and across exec.

use std::fs;

use nix::unistd::Pid;
use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::decode::{self, COUNTED_OPEN_FLAGS};
use super::event::Sysno;

/// The filter, compiled; with the reads when `reads`.
pub(super) fn program(reads: bool) -> Result<BpfProgram, BackendError> {
    let reads: &[(i64, Sysno)] = if reads { &decode::READS } else { &[] };
    let rules = decode::DECODED
        .iter()
        .chain(reads)
        .map(|&(nr, sysno)| {
            let rules = match decode::open_flags_arg(sysno) {
                // Any one of the flags: one rule per bit (rules are or'ed).
                Some(arg) => bits(COUNTED_OPEN_FLAGS)
                    .map(|bit| {
                        SeccompRule::new(vec![SeccompCondition::new(
                            arg as u8,
                            SeccompCmpArgLen::Dword,
                            SeccompCmpOp::MaskedEq(bit),
                            bit,
                        )?])
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                // No rule: the call always matches.
                None => Vec::new(),
            };
            Ok((nr, rules))
        })
        .collect::<Result<_, BackendError>>()?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Trace(0),
        TargetArch::x86_64,
    )?;
    BpfProgram::try_from(filter)
}

/// The set bits of `flags`, one at a time.
fn bits(flags: i32) -> impl Iterator<Item = u64> {
    (0..32)
        .map(|i| 1u64 << i)
        .filter(move |bit| flags as u64 & bit != 0)
}

/// Installs `program` on the calling process (sets no_new_privs first, as
/// an unprivileged filter needs). Runs between fork and exec: it makes two
/// system calls (prctl, seccomp) and allocates nothing. A failure is not
/// reported here: [`in_effect`] tells the tracer.
pub(super) fn install(program: &BpfProgram) {
    let _ = seccompiler::apply_filter(program);
}

/// Does `pid` run under one more seccomp filter than this process (the
/// one [`install`] added)? Read from `/proc`: `Seccomp_filters` counts
/// the filters (Linux 5.9 on); before it, `Seccomp` is the mode (2:
/// filtered), conclusive only if this process has no filter of its own.
pub(super) fn in_effect(pid: Pid) -> bool {
    let status = |who: &str| {
        let text = fs::read_to_string(format!("/proc/{who}/status")).unwrap_or_default();
        let field = |name: &str| -> Option<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
        };
        (field("Seccomp:"), field("Seccomp_filters:"))
    };
    match (status(&pid.to_string()), status("self")) {
        ((_, Some(theirs)), (_, Some(ours))) => theirs > ours,
        ((Some(2), _), (Some(0), _)) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::syscall::decode::{O_CREAT, O_TMPFILE_BIT, O_TRUNC};
    use nix::libc;
    use seccompiler::sock_filter;

    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const AUDIT_ARCH_I386: u32 = 0x4000_0003;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_TRACE: u32 = 0x7ff0_0000;
    const RET_KILL_PROCESS: u32 = 0x8000_0000;

    /// Runs a classic-BPF seccomp program on one call, as the kernel would
    /// (only the instructions seccompiler emits; any other fails the test).
    fn run(program: &[sock_filter], arch: u32, nr: u64, args: [u64; 6]) -> u32 {
        let mut data = Vec::new();
        data.extend_from_slice(&(nr as u32).to_le_bytes());
        data.extend_from_slice(&arch.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes()); // instruction pointer
        for a in args {
            data.extend_from_slice(&a.to_le_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = &program[pc];
            pc += 1;
            let jump = |taken: bool| usize::from(if taken { i.jt } else { i.jf });
            match i.code {
                // BPF_LD | BPF_W | BPF_ABS
                0x20 => {
                    let at = i.k as usize;
                    acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                }
                // BPF_ALU | BPF_AND | BPF_K
                0x54 => acc &= i.k,
                // BPF_JMP | BPF_JA
                0x05 => pc += i.k as usize,
                // BPF_JMP | BPF_JEQ, JGT, JGE, JSET | BPF_K
                0x15 => pc += jump(acc == i.k),
                0x25 => pc += jump(acc > i.k),
                0x35 => pc += jump(acc >= i.k),
                0x45 => pc += jump(acc & i.k != 0),
                // BPF_RET | BPF_K
                0x06 => return i.k,
                code => panic!("instruction {code:#x} at {} not interpreted", pc - 1),
            }
        }
    }

    fn open_args(sysno_nr: i64, flags: i32) -> [u64; 6] {
        let mut args = [0u64; 6];
        if let Some(arg) = decode::sysno(sysno_nr as u64).and_then(decode::open_flags_arg) {
            args[arg] = flags as u64;
        }
        args
    }

    #[test]
    fn the_filter_stops_at_exactly_the_calls_the_decoder_decodes() {
        for reads in [false, true] {
            let program = program(reads).unwrap();
            // Every call number the kernel has (and well past it), with open
            // flags that make an open counted: traced iff decoded (a read
            // only when reads are traced).
            for nr in 0..1024u64 {
                let args = open_args(nr as i64, 0o1 | O_CREAT);
                let action = run(&program, AUDIT_ARCH_X86_64, nr, args);
                let decoded = decode::sysno(nr).is_some_and(|s| reads || !s.is_read());
                assert_eq!(
                    action,
                    if decoded { RET_TRACE } else { RET_ALLOW },
                    "call {nr} (decoded: {decoded}, reads traced: {reads})"
                );
            }
        }
        let program = program(false).unwrap();
        // x32 numbers: neither decoded nor stopped at.
        let x32 = libc::SYS_write as u64 | 0x4000_0000;
        assert_eq!(decode::sysno(x32), None);
        assert_eq!(run(&program, AUDIT_ARCH_X86_64, x32, [0; 6]), RET_ALLOW);
        assert_eq!(
            decode::DECODED.len() + decode::READS.len(),
            28,
            "one entry per Sysno"
        );
        assert!(decode::READS.iter().all(|(_, s)| s.is_read()));
        assert!(decode::DECODED.iter().all(|(_, s)| !s.is_read()));
    }

    #[test]
    fn an_open_is_stopped_at_only_with_a_flag_that_makes_the_decoder_count_it() {
        let program = program(false).unwrap();
        let flag_sets = [
            0,                         // O_RDONLY
            0o2000000,                 // O_RDONLY|O_CLOEXEC, an import
            0o1 | 0o2000 | 0o2000000,  // O_WRONLY|O_APPEND|O_CLOEXEC
            0o2 | 0o200000 | 0o400000, // O_RDWR|O_DIRECTORY|O_NOFOLLOW
            O_CREAT,
            0o1 | O_CREAT | 0o200 | 0o2000000, // exclusive create
            O_TRUNC,
            0o1 | O_TRUNC,
            O_TMPFILE_BIT | 0o200000 | 0o2, // O_TMPFILE|O_RDWR
            -1,
        ];
        for nr in [libc::SYS_open, libc::SYS_openat, libc::SYS_creat] {
            for flags in flag_sets {
                let counted = decode::sysno(nr as u64)
                    .and_then(decode::open_flags_arg)
                    .is_none()
                    || flags & COUNTED_OPEN_FLAGS != 0;
                let action = run(&program, AUDIT_ARCH_X86_64, nr as u64, open_args(nr, flags));
                assert_eq!(
                    action == RET_TRACE,
                    counted,
                    "call {nr} with flags {flags:#o}: action {action:#x}"
                );
                assert!(action == RET_TRACE || action == RET_ALLOW);
            }
        }
        // The flags sit in their own argument: the same bits elsewhere
        // (openat's dirfd) do not count.
        let mut args = [0u64; 6];
        args[0] = O_CREAT as u64;
        assert_eq!(
            run(&program, AUDIT_ARCH_X86_64, libc::SYS_openat as u64, args),
            RET_ALLOW
        );
    }

    #[test]
    fn a_call_through_another_abi_kills_rather_than_running_unseen() {
        let program = program(true).unwrap();
        for nr in [0, 4, 5, libc::SYS_write as u64] {
            assert_eq!(run(&program, AUDIT_ARCH_I386, nr, [0; 6]), RET_KILL_PROCESS);
        }
    }
}
