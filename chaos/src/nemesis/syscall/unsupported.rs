//! Every platform but Linux x86_64: the tracer's API, refusing to start.

use std::convert::Infallible;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command};

use super::{Error, Outcome, TraceConfig};

/// Cannot be constructed here: [`Traced::spawn`] always fails.
#[derive(Debug)]
pub struct Traced {
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    never: Infallible,
}

/// Cannot be constructed here.
#[derive(Debug, Clone)]
pub struct Monitor {
    never: Infallible,
}

impl Traced {
    /// Always [`Error::Unsupported`].
    pub fn spawn(_cmd: Command, _config: TraceConfig) -> Result<Traced, Error> {
        Err(Error::Unsupported {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
        })
    }

    pub fn pid(&self) -> u32 {
        match self.never {}
    }

    pub fn monitor(&self) -> Monitor {
        match self.never {}
    }

    pub fn run(self) -> Result<Outcome, Error> {
        match self.never {}
    }
}

impl Monitor {
    pub fn counted_syscalls(&self) -> u64 {
        match self.never {}
    }

    pub fn recorded_ops(&self) -> usize {
        match self.never {}
    }

    pub fn kill(&self) {
        match self.never {}
    }
}
