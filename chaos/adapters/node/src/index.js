// agentchaos-adapter: write an agentchaos adapter (chaos/PROTOCOL.md,
// protocol version 1) for a session store in JavaScript or TypeScript.
//
// Subclass `Store` (two methods: `open` and `write`), claim what it keeps,
// and `process.exitCode = await serve(new MyStore())`. The kit speaks the
// protocol: framing, validation against the packaged JSON Schema, error
// kinds, the session rules, recovery, projection and context (`Model`).
// Check an adapter with the Python kit's self-test, which runs any
// adapter: `python3 -m agentchaos_adapter.selftest -- node my_store.mjs`.
//
// Importing the kit takes the process's stdout for the protocol
// (wire.js): from then on what anything else prints goes to stderr.

import "./wire.js";

export {
  BadRequest,
  Damaged,
  Exists,
  Invalid,
  IoFailed,
  Locked,
  NotFound,
  RuleViolated,
  StoreError,
  Unsupported,
} from "./errors.js";
export { Call, Model } from "./model.js";
export { PROTOCOL, serve } from "./serve.js";
export { Store } from "./store.js";
