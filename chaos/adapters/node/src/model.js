// The fold of a session's events: rules, projection, recovery marks, context.
//
// `Model` folds records (`{seq, ts, event}`) in seq order as
// chaos/PROTOCOL.md says (section 3's session rules, section 4's
// `projection`, `recover` and `context`); it is a line-by-line port of the
// Python kit's `model.py`, so both kits answer alike. The kit keeps one per
// open session; a store persists records and never has to interpret them.
//
// `Model.check` enforces every session rule. A store that cannot keep the
// rules about side effects (no ledger) subclasses it with
// `effectRules = false` and does not claim `effect_ledger`; `advice` words
// the recovery notice. Nothing here does I/O.

import { RuleViolated } from "./errors.js";
import { MESSAGE_LIKE, seqOfId } from "./schema.js";

/** Stored events do not fold (a parent that is not an entry). */
export class Broken extends Error {}

const eventId = (seq) => `e${seq}`;

/** The first index of a sorted array whose value is >= x. */
function bisectLeft(a, x) {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (a[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The first index of a sorted array whose value is > x. */
function bisectRight(a, x) {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (x < a[mid]) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** A tool call without a result. */
export class Call {
  constructor(ev, seq) {
    this.callId = ev.call_id;
    this.seq = seq;
    this.tool = ev.tool;
    this.args = ev.args;
    this.effect = ev.effect;
    this.operationId = ev.operation_id ?? null;
    this.target = ev.target ?? null;
    this.needsApproval = Boolean(ev.needs_approval);
    this.approval = null;
    this.started = false;
    this.committed = null; // external_ref of its effect_committed
    this.recovery = null; // phase of its tool_recovery since it last started
    this.reconciled = null;
  }

  /** How far it got: a commit, else a durable intent, else nothing. */
  phase() {
    if (this.committed !== null) return "committed";
    if (this.started) return "started";
    return "requested";
  }

  uncertain() {
    return this.recovery !== null && this.reconciled === null;
  }

  view() {
    return {
      call_id: this.callId,
      tool: this.tool,
      args: this.args,
      effect: this.effect,
      operation_id: this.operationId,
      target: this.target,
      needs_approval: this.needsApproval,
      approval: this.approval,
      phase: this.phase(),
      external_ref: this.committed,
      recovery: this.recovery,
      reconciled: this.reconciled,
    };
  }
}

/** A session's state, folded from its records in seq order. */
export class Model {
  constructor() {
    /** Whether `check` keeps the rules about side effects (the ledger). */
    this.effectRules = true;
    this.records = [];
    this.workspace = null;
    this.openRun = null;
    this.runs = new Set();
    this.interrupted = [];
    this.calls = new Map();
    this.committedOps = new Set();
    this.branch = []; // seqs, oldest first (sorted: seqs grow along a path)
    this.compaction = null; // {seq, summary, firstKept, tokensBefore}
    this.plan = null;
    this.nodes = new Map(); // seq -> {parent, compaction}
  }

  get nextSeq() {
    return this.records.length;
  }

  // ---- rules ---------------------------------------------------------------

  openCall(callId, what) {
    const call = this.calls.get(callId);
    if (call === undefined) {
      throw new RuleViolated(`${what} for call '${callId}', which is unknown or already has a result`);
    }
    return call;
  }

  checkParent(parent) {
    if (parent === undefined || parent === null) return;
    const seq = seqOfId(parent);
    if (seq === null || seq >= this.nextSeq) throw new RuleViolated(`parent '${parent}' does not exist`);
    if (!this.nodes.has(seq)) throw new RuleViolated(`parent '${parent}' is not a message-like entry`);
  }

  /** Throws `RuleViolated` if `ev` may not be appended now. */
  check(ev) {
    switch (ev.type) {
      case "session_created":
        if (this.nextSeq !== 0) throw new RuleViolated("session_created must be the first event");
        break;
      case "run_started":
        if (this.openRun !== null) {
          throw new RuleViolated(`run '${ev.run_id}' started while run '${this.openRun}' is open`);
        }
        if (this.runs.has(ev.run_id)) throw new RuleViolated(`run id '${ev.run_id}' was already used`);
        break;
      case "run_finished":
      case "run_interrupted":
      case "request_header":
        if (this.openRun !== ev.run_id) {
          throw new RuleViolated(`${ev.type} for run '${ev.run_id}', which is not the open run`);
        }
        break;
      case "user_message":
      case "assistant_message":
        this.checkParent(ev.parent);
        break;
      case "tool_call": {
        this.checkParent(ev.parent);
        if (this.calls.has(ev.call_id)) throw new RuleViolated(`call id '${ev.call_id}' is already open`);
        const op = ev.operation_id ?? null;
        if (ev.effect === "side_effect" && op === null) {
          throw new RuleViolated(`side-effecting call '${ev.call_id}' needs an operation_id`);
        }
        if (this.effectRules && op !== null && this.committedOps.has(op)) {
          throw new RuleViolated(`operation '${op}' is already committed (call '${ev.call_id}' reuses it)`);
        }
        break;
      }
      case "approval": {
        const call = this.openCall(ev.call_id, "approval");
        if (!call.needsApproval) throw new RuleViolated(`call '${call.callId}' does not need approval`);
        if (call.approval !== null) throw new RuleViolated(`call '${call.callId}' already has an approval decision`);
        break;
      }
      case "tool_started": {
        const call = this.openCall(ev.call_id, "tool_started");
        if (call.needsApproval && call.approval !== "approved") {
          throw new RuleViolated(`call '${call.callId}' needs a durable approval before it starts`);
        }
        if (this.effectRules) checkRestart(call);
        break;
      }
      case "effect_committed": {
        const call = this.openCall(ev.call_id, "effect_committed");
        if (call.operationId !== ev.operation_id) {
          throw new RuleViolated(
            `effect_committed for call '${call.callId}' names operation '${ev.operation_id}', ` +
              `the call has '${call.operationId}'`,
          );
        }
        if (!call.started) throw new RuleViolated(`effect_committed for call '${call.callId}' before its tool_started`);
        if (this.effectRules && this.committedOps.has(ev.operation_id)) {
          throw new RuleViolated(`operation '${ev.operation_id}' is already committed (second commit)`);
        }
        break;
      }
      case "tool_result":
        this.checkParent(ev.parent);
        this.openCall(ev.call_id, "tool_result");
        break;
      case "tool_recovery":
        if (this.openCall(ev.call_id, "tool_recovery").uncertain()) {
          throw new RuleViolated(`call '${ev.call_id}' is already marked uncertain`);
        }
        break;
      case "tool_reconciled": {
        const call = this.openCall(ev.call_id, "tool_reconciled");
        if (call.recovery === null) throw new RuleViolated(`call '${call.callId}' was never marked uncertain`);
        if (call.reconciled !== null) throw new RuleViolated(`call '${call.callId}' is already reconciled`);
        break;
      }
      case "compaction": {
        const parent = ev.parent ?? null;
        this.checkParent(parent);
        const kept = seqOfId(ev.first_kept_id);
        const onBranch = kept !== null && this.onBranch(kept);
        const leaf = this.branch.length ? this.branch[this.branch.length - 1] : null;
        if (!onBranch || parent === null || seqOfId(parent) !== leaf) {
          throw new RuleViolated(
            "compaction must extend the active leaf and keep an entry of the " +
              `active branch ('${ev.first_kept_id}' is not on it)`,
          );
        }
        break;
      }
      case "leaf_moved":
        this.checkParent(ev.leaf);
        break;
      default:
        break;
    }
  }

  // ---- fold ----------------------------------------------------------------

  onBranch(seq) {
    const i = bisectLeft(this.branch, seq);
    return i < this.branch.length && this.branch[i] === seq;
  }

  /** Folds the next record (its seq must be `nextSeq`). */
  apply(record) {
    const { seq, event: ev } = record;
    if (seq !== this.nextSeq) throw new Error(`record ${seq} folded at ${this.nextSeq}`);
    this.records.push(record);
    const kind = ev.type;
    if (MESSAGE_LIKE.has(kind)) {
      let compaction = null;
      if (kind === "compaction") {
        const kept = seqOfId(ev.first_kept_id);
        compaction = { seq, summary: ev.summary, firstKept: kept === null ? seq : kept, tokensBefore: ev.tokens_before };
      }
      const parent = ev.parent === undefined || ev.parent === null ? null : seqOfId(ev.parent);
      this.nodes.set(seq, { parent, compaction });
      this.attach(seq, parent);
    }
    const call = ev.call_id === undefined ? undefined : this.calls.get(ev.call_id);
    switch (kind) {
      case "session_created":
        this.workspace = ev.workspace;
        break;
      case "workspace_rebound":
        this.workspace = ev.to;
        break;
      case "run_started":
        this.openRun = ev.run_id;
        this.runs.add(ev.run_id);
        this.interrupted = [];
        break;
      case "run_finished":
        this.openRun = null;
        break;
      case "run_interrupted":
        this.openRun = null;
        this.interrupted.push(ev.run_id);
        break;
      case "tool_call":
        this.calls.set(ev.call_id, new Call(ev, seq));
        break;
      case "approval":
        if (call) call.approval = ev.decision;
        break;
      case "tool_started":
        if (call) {
          call.started = true;
          call.recovery = null;
          call.reconciled = null;
        }
        break;
      case "effect_committed":
        this.committedOps.add(ev.operation_id);
        if (call) call.committed = ev.external_ref;
        break;
      case "tool_result":
        this.calls.delete(ev.call_id);
        break;
      case "tool_recovery":
        if (call) {
          call.recovery = ev.phase;
          call.reconciled = null;
        }
        break;
      case "tool_reconciled":
        if (call) call.reconciled = ev.outcome;
        break;
      case "plan_updated":
        this.plan = { goal: ev.goal, steps: ev.steps };
        break;
      case "leaf_moved": {
        const leaf = seqOfId(ev.leaf);
        if (leaf !== null) this.switchTo(leaf);
        break;
      }
      case "compaction": {
        this.compaction = this.nodes.get(seq).compaction;
        const cut = bisectLeft(this.branch, this.compaction.firstKept);
        this.branch.splice(0, cut);
        break;
      }
      default:
        break;
    }
  }

  attach(seq, parent) {
    if (parent === null) {
      this.branch = [];
      this.compaction = null;
    } else if (!(this.branch.length && this.branch[this.branch.length - 1] === parent)) {
      this.switchTo(parent);
    }
    this.branch.push(seq);
  }

  switchTo(leaf) {
    if (this.onBranch(leaf)) {
      const c = this.compaction;
      if (c === null || c.seq <= leaf) {
        this.branch.splice(bisectRight(this.branch, leaf));
        return;
      }
    }
    // Walk up to the root, or to the first kept entry of the nearest
    // compaction on the path.
    const path = [];
    let compaction = null;
    let cursor = leaf;
    while (cursor !== null) {
      if (compaction !== null && cursor < compaction.firstKept) break;
      const node = this.nodes.get(cursor);
      if (node === undefined) throw new Broken(`history tree refers to ${eventId(cursor)}, which is not an entry`);
      if (compaction === null) compaction = node.compaction;
      path.push(cursor);
      cursor = node.parent;
    }
    path.reverse();
    this.branch = path;
    this.compaction = compaction;
  }

  // ---- views ---------------------------------------------------------------

  openCalls() {
    return [...this.calls.values()].sort((a, b) => a.seq - b.seq);
  }

  uncertain() {
    return this.openCalls()
      .filter((c) => c.uncertain())
      .map((c) => ({
        call_id: c.callId,
        tool: c.tool,
        target: c.target,
        phase: c.recovery,
        effect: c.effect,
        operation_id: c.operationId,
        args: c.args,
        external_ref: c.committed,
      }));
  }

  /**
   * What recovery appends now: `run_interrupted` for the open run and one
   * `tool_recovery` per call without a result and without a mark since it
   * last started, with the phase `phaseOf` gives it.
   */
  recoveryMarks(phaseOf) {
    const marks = [];
    if (this.openRun !== null) marks.push({ type: "run_interrupted", run_id: this.openRun });
    for (const call of this.openCalls()) {
      if (call.recovery === null) {
        marks.push({ type: "tool_recovery", call_id: call.callId, status: "uncertain", phase: phaseOf(call) });
      }
    }
    return marks;
  }

  projection() {
    return {
      next_seq: this.nextSeq,
      open_run: this.openRun,
      interrupted_runs: [...this.interrupted],
      leaf: this.branch.length ? eventId(this.branch[this.branch.length - 1]) : null,
      branch: this.branch.map(eventId),
      open_calls: this.openCalls().map((c) => c.view()),
      committed_operations: [...this.committedOps].sort(byUtf8),
      plan: this.plan,
    };
  }

  /**
   * The model's view of the active branch: summary, plan, entries (oldest
   * dropped first to fit `budget` tokens of 4 bytes) and the recovery
   * notice, which no budget trims.
   */
  context(budget) {
    let head = "";
    if (this.compaction !== null) {
      const c = this.compaction;
      head += `Summary of the earlier conversation (${c.tokensBefore} tokens):\n${c.summary}\n`;
    }
    if (this.plan !== null) {
      head += `Plan: ${this.plan.goal}\n`;
      for (const s of this.plan.steps) {
        const status = s.status === "blocked" ? `blocked: ${s.reason}` : s.status.replaceAll("_", " ");
        head += `  ${s.id} ${s.title} (${status})\n`;
      }
    }
    const entries = this.branch.map((seq) => entry(this.records[seq].event)).filter((t) => t !== null);
    const notice = this.notice();
    let skip = 0;
    if (budget !== undefined && budget !== null) {
      let total = tokens(head) + tokens(notice) + entries.reduce((n, e) => n + tokens(e), 0);
      while (total > budget && skip < entries.length) {
        total -= tokens(entries[skip]);
        skip += 1;
      }
    }
    let out = head;
    if (skip) out += `(${skip} earlier entries left out to fit the budget)\n`;
    return out + entries.slice(skip).join("") + notice;
  }

  notice() {
    const calls = this.openCalls().filter((c) => c.uncertain());
    if (!this.interrupted.length && !calls.length) return "";
    let out = "RECOVERY: the previous process was killed. Check these before relying on them:\n";
    for (const run of this.interrupted) out += `  run ${run} was interrupted before it finished.\n`;
    for (const c of calls) {
      let what = `call ${c.callId} (${c.tool}`;
      if (c.target !== null) what += ` on ${c.target}`;
      if (c.operationId !== null) what += `, operation ${c.operationId}`;
      out += `  ${what}) is uncertain, phase ${c.recovery}: ${this.advice(c)}\n`;
    }
    return out;
  }

  /** What the recovery notice tells the model to do about an uncertain call. */
  advice(call) {
    if (call.recovery === "requested") return "it never started; run it if it is still wanted.";
    if (call.recovery === "started") return "it may have run; ask the tool about it before running it again.";
    return `its effect happened (ref ${call.committed}); do not run it again.`;
  }
}

/**
 * A committed call never starts again; a started one only after a
 * recovery mark and, for a side effect marked started or committed, only
 * after it was reconciled `not_applied`.
 */
function checkRestart(call) {
  if (call.committed !== null) throw new RuleViolated(`call '${call.callId}' committed its effect; it never starts again`);
  if (!call.started) return;
  if (call.recovery === null) {
    throw new RuleViolated(`call '${call.callId}' already started; it starts again only after recovery`);
  }
  const risky = call.effect === "side_effect" && (call.recovery === "started" || call.recovery === "committed");
  if (risky && call.reconciled !== "not_applied") {
    throw new RuleViolated(
      `side effect '${call.callId}' is uncertain (phase ${call.recovery}); ` +
        "it starts again only after tool_reconciled not_applied",
    );
  }
}

const encoder = new TextEncoder();

/** Code point order, which is UTF-8 byte order (JavaScript sorts by UTF-16 units). */
function byUtf8(a, b) {
  const x = [...a].map((c) => c.codePointAt(0));
  const y = [...b].map((c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

const tokens = (text) => Math.ceil(encoder.encode(text).length / 4);

function entry(ev) {
  switch (ev.type) {
    case "user_message":
      return `user: ${ev.text}\n`;
    case "assistant_message":
      return `assistant: ${ev.text}\n`;
    case "tool_call": {
      const on = ev.target !== undefined && ev.target !== null ? ` on ${ev.target}` : "";
      return `tool call ${ev.call_id}: ${ev.tool}${on} ${JSON.stringify(ev.args)}\n`;
    }
    case "tool_result": {
      const blob = ev.blob ?? null;
      const output = ev.output ?? null;
      let body;
      if (blob !== null) body = `(blob ${blob.digest}, ${blob.size} bytes)`;
      else if (typeof output === "string") body = output;
      else body = output === null ? "" : JSON.stringify(output);
      return `tool result ${ev.call_id} (${ev.status}): ${body}\n`;
    }
    default:
      return null;
  }
}
