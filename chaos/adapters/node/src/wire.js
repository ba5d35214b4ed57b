// The wire: fd 1, which carries the protocol's replies.
//
// Importing the kit takes it. From then on `console.log`, `console.info`
// and `console.debug` write to stderr, and `process.stdout` is
// `process.stderr` (its `write`, and whatever else writes through it), so
// a store or a library that prints cannot put a line on the wire that the
// harness would read as a reply; the kit alone writes to fd 1, with
// `writeSync` (serve.js). Import the kit before the store's own modules
// for their import-time output to be covered too.
//
// It must never create the real `process.stdout` stream: Node makes a
// pipe non-blocking when it does, and the kit's synchronous writes to
// fd 1 could then fail with EAGAIN. Node has no dup2: a native addon that
// writes to fd 1 itself is not covered (the Python kit moves fd 1 too).

Object.defineProperty(process, "stdout", {
  configurable: true,
  enumerable: true,
  get: () => process.stderr,
});
console.log = console.error;
console.info = console.error;
console.debug = console.error;
