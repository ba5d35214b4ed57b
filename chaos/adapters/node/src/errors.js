// The protocol's error kinds (chaos/PROTOCOL.md, section 1) as exceptions.
//
// A store throws one of these to answer a request with an `error` reply;
// the kit turns it into `{"kind": ..., "message": ...}`. Messages are one
// line (the kit joins lines if they are not). Anything else a store throws
// is a bug: the adapter prints one line on stderr and exits 2.

/** A refusal or failure with its protocol error kind. */
export class StoreError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(String(message).split(/\s+/).filter(Boolean).join(" "));
    this.name = new.target.name;
  }

  /** The protocol error kind. */
  get kind() {
    return "io";
  }
}

/** A session rule refused the event; nothing was written. */
export class RuleViolated extends StoreError {
  /** @param {string} message */
  constructor(message) {
    super(`rule violated: ${message}`);
  }
  get kind() {
    return "rule";
  }
}

/** An I/O call failed; the event is not acknowledged. */
export class IoFailed extends StoreError {
  get kind() {
    return "io";
  }
}

/** Stored data is damaged; the store refuses to load it. */
export class Damaged extends StoreError {
  get kind() {
    return "damage";
  }
}

/** Another writer holds the session. */
export class Locked extends StoreError {
  get kind() {
    return "locked";
  }
}

/** `open` without `create` of a session that does not exist, or no such blob. */
export class NotFound extends StoreError {
  get kind() {
    return "not_found";
  }
}

/** `open` with `create` of a session that exists. */
export class Exists extends StoreError {
  get kind() {
    return "exists";
  }
}

/** A well-formed request with unusable content. */
export class Invalid extends StoreError {
  get kind() {
    return "invalid";
  }
}

/** The request does not fit the protocol. */
export class BadRequest extends StoreError {
  get kind() {
    return "bad_request";
  }
}

/** The store does not implement the operation. */
export class Unsupported extends StoreError {
  get kind() {
    return "unsupported";
  }
}

/**
 * Refusals that leave nothing behind: after any other error from a write
 * the session may or may not hold the event, and the kit stops using it.
 */
export const NOTHING_WRITTEN = new Set(["rule", "invalid", "bad_request", "unsupported", "exists", "not_found"]);
