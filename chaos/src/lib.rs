//! agentchaos: crash-consistency harness for agent session stores.

pub mod powerloss;
pub mod syscall;
