//! agentchaos: crash-consistency harness for agent session stores.

pub mod adapter;
pub mod powerloss;
pub mod syscall;
