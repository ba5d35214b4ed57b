//! The event vocabulary, defined by the protocol crate
//! (`agentchaos_protocol::event`) and re-exported here so that
//! `agentstore::event::…` names the same types; plus the store's clock.
//! The rules about which event may follow which live in `session`, and the
//! byte framing lives in `framing`.

pub use agentchaos_protocol::event::*;

/// The current time as the store writes it.
pub fn now_ts() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
