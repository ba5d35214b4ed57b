// Types of agentchaos-adapter (chaos/PROTOCOL.md, protocol version 1).
// Events and records are the protocol's JSON; their exact shapes are the
// packaged JSON Schema (src/protocol.schema.json), which the kit validates.

/** An event: `{type, ...fields}` as chaos/PROTOCOL.md section 3 lists them. */
export type Event = { type: string; [field: string]: unknown };

/** What a store keeps: seq 0 is `session_created`, then 1, 2, … without gaps. */
export interface StoredRecord {
  seq: number;
  ts: string | null;
  event: Event;
}

/** The capability names of chaos/PROTOCOL.md section 2. */
export type Capability =
  | "durable_append"
  | "torn_tail_repair"
  | "damage_refusal"
  | "orphan_marking"
  | "effect_ledger"
  | "checkpoint_projection"
  | "branches"
  | "compaction"
  | "writer_lock"
  | "blobs"
  | "lease";

export type Phase = "requested" | "started" | "committed";

export const PROTOCOL: 1;

/** A refusal or failure with its protocol error kind. */
export class StoreError extends Error {
  constructor(message: string);
  readonly kind: string;
}
/** A session rule refused the event; nothing was written. */
export class RuleViolated extends StoreError {}
/** An I/O call failed; the event is not acknowledged. */
export class IoFailed extends StoreError {}
/** Stored data is damaged; the store refuses to load it. */
export class Damaged extends StoreError {}
/** Another writer holds the session. */
export class Locked extends StoreError {}
/** `open` without `create` of a session that does not exist, or no such blob. */
export class NotFound extends StoreError {}
/** `open` with `create` of a session that exists. */
export class Exists extends StoreError {}
/** A well-formed request with unusable content. */
export class Invalid extends StoreError {}
/** The request does not fit the protocol. */
export class BadRequest extends StoreError {}
/** The store does not implement the operation. */
export class Unsupported extends StoreError {}

/** A tool call without a result. */
export class Call {
  readonly callId: string;
  readonly seq: number;
  readonly tool: string;
  readonly args: unknown;
  readonly effect: string;
  readonly operationId: string | null;
  readonly target: string | null;
  readonly needsApproval: boolean;
  readonly approval: string | null;
  readonly started: boolean;
  readonly committed: string | null;
  readonly recovery: Phase | null;
  readonly reconciled: string | null;
  /** How far it got: a commit, else a durable intent, else nothing. */
  phase(): Phase;
  uncertain(): boolean;
}

/** A session's state, folded from its records in seq order. */
export class Model {
  /** Whether `check` keeps the rules about side effects (the ledger). */
  effectRules: boolean;
  readonly records: StoredRecord[];
  readonly workspace: string | null;
  readonly nextSeq: number;
  /** Throws `RuleViolated` if `event` may not be appended now. */
  check(event: Event): void;
  /** Folds the next record (its seq must be `nextSeq`). */
  apply(record: StoredRecord): void;
  projection(): Record<string, unknown>;
  context(budget: number | null): string;
  /** What the recovery notice tells the model to do about an uncertain call. */
  advice(call: Call): string;
}

type MaybePromise<T> = T | Promise<T>;

/** What an adapter author subclasses: one adapter process's store, one session open at a time. */
export class Store {
  name: string;
  version: string | null;
  /** Capability names this store keeps. */
  claims: Capability[];
  /** The fold the kit keeps; a subclass of `Model` to relax or reword it. */
  modelClass: new () => Model;
  /** The open session's fold, set by the kit. */
  model: Model | null;
  /** What `hello` claims; `claims` unless overridden. */
  capabilities(): Capability[];
  /** The session's records in seq order; `[]` if it does not exist (or its creation was interrupted). */
  open(root: string, session: string, create: boolean): MaybePromise<StoredRecord[]>;
  /** Makes `records` durable, in order, after the ones before them; only then returns. */
  write(records: StoredRecord[]): MaybePromise<void>;
  /** Releases the session (and its lock). Also called after a refused `open`. */
  close(): MaybePromise<void>;
  /** The records after seq `after` (all if null), at most `limit`. */
  read(after: number | null, limit: number | null): MaybePromise<StoredRecord[]>;
  /** The phase `recover` marks a call without a result with. */
  recoveryPhase(call: Call): Phase;
  /** Claim `checkpoint_projection` only with this overridden. */
  checkpoint(): MaybePromise<void>;
  /** Claim `blobs` only with this and `getBlob` overridden. */
  putBlob(digest: string, data: Buffer): MaybePromise<void>;
  getBlob(digest: string, size: number): MaybePromise<Buffer | Uint8Array>;
}

/** Serves `store` on stdin/stdout until stdin ends; resolves to the exit code. */
export function serve(store: Store): Promise<number>;
