//! The model's context, rendered from the fold and the events this process
//! holds: the compaction summary nearest to the leaf, the plan, every entry
//! of the active branch's window (messages verbatim, tool calls and
//! results), then agentstore's `<recovery>` block. A budget drops the
//! oldest entries first; the summary and the recovery block always stay.
//!
//! It only reads; nothing here writes.

use std::fmt::Write;

use agentchaos_protocol::event::Event;
use agentstore::context::{estimate_tokens, head, recovery_block, render_entry};
use agentstore::projection::Projection;

/// The context of the active branch, within `budget_tokens` if given.
pub fn render(projection: &Projection, events: &[Event], budget_tokens: Option<u64>) -> String {
    let head = head(projection, true);
    let recovery = recovery_block(projection);
    let compaction_seq = projection.compaction().map(|c| c.seq);
    let entries: Vec<String> = projection
        .branch()
        .iter()
        .filter(|&&seq| Some(seq) != compaction_seq)
        .filter_map(|&seq| events.get(seq as usize).and_then(render_entry))
        .collect();
    let mut keep_from = 0;
    if let Some(budget) = budget_tokens {
        let mut total = estimate_tokens(&head)
            + estimate_tokens(&recovery)
            + entries.iter().map(|e| estimate_tokens(e)).sum::<u64>();
        while total > budget && keep_from < entries.len() {
            total -= estimate_tokens(&entries[keep_from]);
            keep_from += 1;
        }
    }
    let mut out = head;
    if keep_from > 0 {
        let _ = writeln!(
            out,
            "[{keep_from} earlier entries omitted to fit the token budget]"
        );
    }
    for e in &entries[keep_from..] {
        out.push_str(e);
    }
    out.push_str(&recovery);
    out
}
