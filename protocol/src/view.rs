//! The `projection` reply: what resuming a session needs, in a form two
//! independent stores can agree on (`chaos/PROTOCOL.md`, `projection`).
//!
//! Stores serve a [`ProjectionView`]; the harness's oracle computes the one
//! a store must serve from the events, and compares them field by field
//! ([`ProjectionView::differences`]). How a view is computed is never this
//! module's: each store derives it from its own state.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{Decision, Effect, EventId, Phase, PlanStep, ReconcileOutcome, Seq};

/// The plan as last updated (`plan_updated`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Plan {
    pub goal: String,
    pub steps: Vec<PlanStep>,
}

/// The projection every adapter serves and the harness computes from its
/// own fold. The default is the view of an empty session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProjectionView {
    /// The seq the next event gets.
    pub next_seq: Seq,
    /// The run started and neither finished nor interrupted.
    pub open_run: Option<String>,
    /// Runs interrupted since the last `run_started`.
    pub interrupted_runs: Vec<String>,
    /// The active leaf of the history tree: the last message-like event
    /// appended, or the target of the last `leaf_moved` after it.
    pub leaf: Option<EventId>,
    /// The active branch, oldest first: the path from the root to the leaf,
    /// starting at the first kept entry of the nearest compaction on it.
    pub branch: Vec<EventId>,
    /// Calls without a result, in the order of their `tool_call`.
    pub open_calls: Vec<CallView>,
    /// Operation ids with an `effect_committed`, sorted bytewise.
    pub committed_operations: Vec<String>,
    /// The last `plan_updated`.
    pub plan: Option<Plan>,
}

/// A call without a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CallView {
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    pub effect: Effect,
    pub operation_id: Option<String>,
    pub target: Option<String>,
    pub needs_approval: bool,
    /// The decision of its first approval.
    pub approval: Option<Decision>,
    /// How far it got: `committed` with an `effect_committed`, else `started`
    /// with a `tool_started`, else `requested`.
    pub phase: Phase,
    /// The `external_ref` of its `effect_committed`.
    pub external_ref: Option<String>,
    /// The phase of its recovery mark since it last started, if any.
    pub recovery: Option<Phase>,
    /// The outcome of its reconciliation since that mark, if any.
    pub reconciled: Option<ReconcileOutcome>,
}

impl ProjectionView {
    /// The fields where `self` (expected) and `found` differ, one line each:
    /// `field: expected X, found Y`. Empty when they agree.
    pub fn differences(&self, found: &ProjectionView) -> Vec<String> {
        let (Value::Object(a), Value::Object(b)) = (
            serde_json::to_value(self).expect("a view serializes"),
            serde_json::to_value(found).expect("a view serializes"),
        ) else {
            unreachable!("a struct serializes to an object")
        };
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(*v))
            .map(|(k, v)| format!("{k}: expected {v}, found {}", b[k]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_field() {
        let a = ProjectionView::default();
        let mut b = a.clone();
        assert!(a.differences(&b).is_empty());
        b.next_seq = 4;
        b.leaf = Some("e3".into());
        assert_eq!(
            a.differences(&b),
            [
                "leaf: expected null, found \"e3\"",
                "next_seq: expected 0, found 4"
            ]
        );
    }
}
