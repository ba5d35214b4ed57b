// `Store`: what an adapter author subclasses.
//
// A store keeps one session's records durably; the kit does the rest of
// the protocol (chaos/PROTOCOL.md): framing, validation against the schema,
// the session rules, `session_created` and `workspace_rebound`, recovery
// marks, `projection` and `context` (all from `Model`, the fold of the
// records).
//
// A record is `{seq, ts, event}`; seq 0 is `session_created`, then 1, 2, …
// without gaps. Two methods are required, and may be async:
//
// - `open(root, session, create)`: open (with `create`, create if missing)
//   the session's storage and return its records in seq order, `[]` for a
//   session that does not exist or whose creation a crash interrupted.
//   Throw `Locked` if another writer holds it, `Damaged` if it does not
//   load. The kit answers `exists`/`not_found` itself and calls `close`.
// - `write(records)`: make these records durable, in this order, after the
//   ones before them, and only then return. One call may carry several
//   records (recovery writes its marks in one call). Throw `IoFailed` (a
//   Node system error, one with a `code`, is mapped to it) if that is not
//   certain: the kit then refuses every request until the session is
//   opened again. A refusal before anything was written (`Invalid`,
//   `RuleViolated`) keeps the session usable.
//
// Everything else has a default that claims nothing: `checkpoint` and the
// blobs answer `unsupported`, `read` serves the records from memory, and
// `claims` is empty. Claim a capability only if the store keeps it; the
// kit refuses to start when a claim needs a method that was not overridden.

import { Unsupported } from "./errors.js";
import { Model } from "./model.js";

/** One adapter process's store; at most one session open at a time. */
export class Store {
  constructor() {
    this.name = "node-store";
    /** @type {string | null} */
    this.version = null;
    /** Capability names (chaos/PROTOCOL.md, section 2) this store keeps. */
    this.claims = [];
    /** The fold the kit keeps; set a subclass of `Model` to relax or reword it. */
    this.modelClass = Model;
    /** The open session's fold, set by the kit: the records before the ones being written. */
    this.model = null;
  }

  /** What `hello` claims; `claims` unless overridden. */
  capabilities() {
    return [...this.claims];
  }

  open(_root, _session, _create) {
    throw new Error(`${this.constructor.name} does not implement open(root, session, create)`);
  }

  write(_records) {
    throw new Error(`${this.constructor.name} does not implement write(records)`);
  }

  /** Releases the session (and its lock). Also called after a refused `open`. */
  close() {}

  /**
   * The records after seq `after` (all if null), at most `limit`. Override
   * to serve them from storage rather than from memory.
   */
  read(after, limit) {
    const start = after === null || after === undefined ? 0 : after + 1;
    const records = this.model.records.slice(start);
    return limit === null || limit === undefined ? records : records.slice(0, limit);
  }

  /** The phase `recover` marks a call without a result with: how far it got by its durable events. */
  recoveryPhase(call) {
    return call.phase();
  }

  /** Writes whatever makes resuming faster (claim `checkpoint_projection`). */
  checkpoint() {
    throw new Unsupported("checkpoint is not supported by this store");
  }

  /** Stores `data` (a Buffer) under its SHA-256 `digest`, durably (claim `blobs`). */
  putBlob(_digest, _data) {
    throw new Unsupported("put_blob is not supported by this store");
  }

  /** The bytes (a Buffer) stored under `digest`; `NotFound` if there are none. */
  getBlob(_digest, _size) {
    throw new Unsupported("get_blob is not supported by this store");
  }
}

/** What a claim needs the store to have overridden. */
const NEEDS = { checkpoint_projection: ["checkpoint"], blobs: ["putBlob", "getBlob"] };

/** Claims whose methods are still the defaults that refuse. */
export function unbackedClaims(store) {
  const out = [];
  for (const [claim, methods] of Object.entries(NEEDS)) {
    if (!store.capabilities().includes(claim)) continue;
    const missing = methods.filter((m) => store[m] === Store.prototype[m]);
    if (missing.length) out.push(`${claim} (needs ${missing.join(", ")})`);
  }
  return out;
}
