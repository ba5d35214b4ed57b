//! A write that fails for real (ENOSPC on a tiny tmpfs) must not leave a
//! fragment that the next append fuses with. Linux only; needs permission to
//! mount tmpfs (root). Without it the test says so and does nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentstore::event::Redaction;
use agentstore::scan::{self, LogPosition};
use agentstore::{Durability, Error, Event, EventLog, LogOptions};

use common::paths;

/// A tmpfs mounted for the test, unmounted on drop.
struct TinyFs {
    dir: tempfile::TempDir,
}

impl TinyFs {
    fn mount(size: &str) -> Result<TinyFs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(TinyFs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn big_event(i: usize) -> Event {
    Event::AssistantMessage {
        parent: None,
        text: format!("{i}:{}", "y".repeat(1500)),
    }
}

#[test]
fn a_write_that_runs_out_of_space_leaves_no_fragment() {
    let _serial = common::serial();
    let fs = match TinyFs::mount("64k") {
        Ok(fs) => fs,
        Err(why) => {
            println!("SKIPPED a_write_that_runs_out_of_space_leaves_no_fragment: cannot mount tmpfs ({why})");
            return;
        }
    };
    let root = fs.path().join("root");
    let paths = paths(&root, "full");
    let log = EventLog::create(&paths, Durability::Sync).unwrap();
    // Space to give back once the log has hit the wall.
    let filler: PathBuf = fs.path().join("filler");
    std::fs::write(&filler, vec![1u8; 16 * 1024]).unwrap();

    let mut acked_end = 0;
    let mut acked = 0;
    let err = loop {
        match log.append(&big_event(acked)) {
            Ok(a) => {
                acked_end = a.end();
                acked += 1;
            }
            Err(e) => break e,
        }
        assert!(acked < 1000, "the file system never filled up");
    };
    match &err {
        Error::Io { source, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc_enospc()), "{err}")
        }
        other => panic!("expected an ENOSPC I/O error, got {other}"),
    }
    // The partial line was rolled back: the file ends at the last ack.
    assert_eq!(std::fs::metadata(paths.events()).unwrap().len(), acked_end);
    assert_eq!(log.end().offset, acked_end);

    // With space again, the same handle appends a readable line.
    std::fs::remove_file(&filler).unwrap();
    let next = Event::RunStarted {
        run_id: "after-enospc".into(),
    };
    let a = log.append_with(&next, Redaction::Public).unwrap();
    assert_eq!((a.seq(), a.offset()), (acked as u64, acked_end));
    drop(log);

    let mut last = None;
    let verified = scan::verify(&paths.events(), LogPosition::START, |_, rec| {
        last = rec.event().cloned();
        Ok(())
    })
    .unwrap();
    assert_eq!((verified.end.seq, verified.torn), (acked as u64 + 1, None));
    assert_eq!(last, Some(next));
    let (_, report) = EventLog::open(&paths, LogOptions::default(), |_, _| Ok(())).unwrap();
    assert_eq!(report.repaired, None);
    assert!(
        acked > 3,
        "only {acked} events fit: the test did not exercise much"
    );
}

fn libc_enospc() -> i32 {
    nix::errno::Errno::ENOSPC as i32
}
