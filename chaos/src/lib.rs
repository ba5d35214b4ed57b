//! agentchaos: crash-consistency harness for agent session stores.
