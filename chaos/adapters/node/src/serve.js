// The serve loop: protocol version 1 (chaos/PROTOCOL.md) over a `Store`.
//
// One JSON request per stdin line, one JSON reply per stdout line, written
// (synchronously, to fd 1) before the next request is read; nothing else
// ever goes to stdout, so a store must log to stderr only. Every request is
// checked against the schema first (`bad_request`, naming the field). A
// `StoreError` a store throws is its `error` reply; any other exception is
// a bug: one line on stderr naming it and where, exit code 2, and the
// harness reports the adapter's death as a protocol error.
//
// Node cannot fork a running process, so a Node adapter speaks version 1
// only: one process per store life.

import { createHash } from "node:crypto";
import { readSync, statSync, writeSync } from "node:fs";
import { resolve } from "node:path";

import { BadRequest, Damaged, Exists, Invalid, IoFailed, NOTHING_WRITTEN, NotFound, StoreError, Unsupported } from "./errors.js";
import { Broken } from "./model.js";
import { BadShape, CAPABILITIES, checkEvent, checkRequest } from "./schema.js";
import { unbackedClaims } from "./store.js";

export const PROTOCOL = 1;
const MAX_SESSION_ID = 128;

const oneLine = (text) => String(text).split(/\s+/).filter(Boolean).join(" ");

/** A Node system error (ENOSPC, EIO, …): the store's I/O failed. */
const isSystemError = (e) => e instanceof Error && typeof e.code === "string" && typeof e.syscall === "string";

/**
 * `Invalid` unless `session` is 1 to 128 bytes of ASCII letters, digits,
 * '-', '_' and '.', not starting with '.'.
 */
export function checkSessionId(session) {
  const bad = (why) => new Invalid(`invalid session id ${JSON.stringify(session)}: ${why}`);
  const bytes = Buffer.byteLength(session, "utf8");
  if (bytes < 1 || bytes > MAX_SESSION_ID) throw bad("must be 1 to 128 bytes");
  if (session.startsWith(".")) throw bad("must not start with '.'");
  if (!/^[A-Za-z0-9._-]+$/.test(session)) throw bad("only ASCII letters, digits, '-', '_' and '.' are allowed");
}

/**
 * Folds loaded records into `model`; `Damaged` unless they are
 * `{seq, ts, event}` numbered 0..n-1 with events that fit the schema.
 */
export function fold(records, model, where) {
  if (!Array.isArray(records)) throw new Damaged(`${where}: open returned no list of records`);
  records.forEach((r, i) => {
    if (typeof r !== "object" || r === null || !Number.isInteger(r.seq) || typeof r.event !== "object" || r.event === null) {
      throw new Damaged(`${where}: record ${i} is not {seq, ts, event}`);
    }
    if (r.seq !== i) {
      throw new Damaged(`${where}: records are not numbered 0..${records.length - 1}: seq ${r.seq} at position ${i}`);
    }
    try {
      checkEvent(r.event);
      model.apply(r);
    } catch (e) {
      if (e instanceof BadShape) throw new Damaged(`${where}: record ${i}: ${e.message}`);
      if (e instanceof Broken) throw new Damaged(`${where}: ${e.message}`);
      throw e;
    }
  });
  if (records.length && records[0].event.type !== "session_created") {
    throw new Damaged(`${where}: record 0 is not session_created`);
  }
}

function isDirectory(path) {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** Dispatches requests that fit the schema to one `Store`. */
export class Server {
  constructor(store) {
    this.store = store;
    this.isOpen = false;
    this.broken = null;
  }

  get model() {
    if (!this.isOpen) throw new BadRequest("no session is open (send open first)");
    if (this.broken !== null) {
      throw new IoFailed(`the session is unusable after a failed write (${this.broken}); close and open it again`);
    }
    return this.store.model;
  }

  /** The reply line (with its newline) to one request line. */
  async handle(line) {
    let reqId = null;
    let body;
    try {
      let req;
      try {
        req = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(line));
      } catch (e) {
        throw new BadRequest(`request is not JSON: ${e.message}`);
      }
      if (typeof req === "object" && req !== null && !Array.isArray(req) && "id" in req) reqId = req.id;
      try {
        checkRequest(req);
      } catch (e) {
        if (e instanceof BadShape) throw new BadRequest(e.message);
        throw e;
      }
      body = { ok: await this.dispatch(req) };
    } catch (e) {
      if (e instanceof StoreError) body = { error: { kind: e.kind, message: e.message } };
      else if (isSystemError(e)) body = { error: { kind: "io", message: oneLine(e.message) } };
      else throw e;
    }
    return `${JSON.stringify({ id: reqId, ...body })}\n`;
  }

  // ---- writing -------------------------------------------------------------

  /**
   * Checks `events` against the current state (they must not depend on
   * each other), has the store make them durable, then folds them.
   */
  async write(events) {
    const model = this.model;
    const records = events.map((ev, i) => {
      model.check(ev);
      return { seq: model.nextSeq + i, ts: new Date().toISOString(), event: ev };
    });
    try {
      await this.store.write(records);
    } catch (e) {
      if (e instanceof StoreError) {
        // It may or may not be on disk: never go on from a guess.
        if (!NOTHING_WRITTEN.has(e.kind)) this.broken = e.message;
        throw e;
      }
      if (isSystemError(e)) {
        this.broken = oneLine(e.message);
        throw new IoFailed(`write: ${this.broken}`);
      }
      throw e;
    }
    for (const r of records) model.apply(r);
    return records.map((r) => r.seq);
  }

  // ---- operations ----------------------------------------------------------

  /** Serves a request that fits the schema. */
  async dispatch(req) {
    const store = this.store;
    switch (req.op) {
      case "hello": {
        if (req.protocol !== PROTOCOL) {
          throw new Unsupported(`this adapter speaks protocol ${PROTOCOL}, not ${req.protocol}`);
        }
        const hello = { name: store.name };
        if (store.version !== null && store.version !== undefined) hello.version = store.version;
        return { ...hello, protocol: PROTOCOL, capabilities: store.capabilities() };
      }
      case "open":
        if (req.lease != null) {
          // The kit keeps no lease record (chaos/PROTOCOL.md, section 9).
          throw new Unsupported("open with a lease: this store does not claim `lease`");
        }
        return this.open(req.root, req.session, req.workspace ?? null, req.create);
      case "append": {
        if (req.event.type === "tool_started") {
          throw new BadRequest("tool_started is the intent: send start_tool, not append");
        }
        const [seq] = await this.write([req.event]);
        return { seq, id: `e${seq}` };
      }
      case "start_tool": {
        const [seq] = await this.write([{ type: "tool_started", call_id: req.call_id }]);
        return { seq, id: `e${seq}`, operation_id: this.model.calls.get(req.call_id).operationId };
      }
      case "recover": {
        const marks = this.model.recoveryMarks((call) => store.recoveryPhase(call));
        if (marks.length) await this.write(marks);
        const model = this.model;
        return { interrupted_runs: [...model.interrupted], uncertain: model.uncertain(), appended: marks.length };
      }
      case "events": {
        void this.model; // refuses without an open, usable session
        const records = await store.read(req.after ?? null, req.limit ?? null);
        return { records: records.map((r) => ({ ...r, id: `e${r.seq}` })) };
      }
      case "context":
        return { text: this.model.context(req.budget ?? null) };
      case "projection":
        return this.model.projection();
      case "checkpoint":
        void this.model;
        await store.checkpoint();
        return { next_seq: this.model.nextSeq };
      case "put_blob": {
        void this.model;
        if (!/^(?:[0-9a-fA-F]{2})*$/.test(req.hex)) throw new BadRequest("put_blob: hex: not an even number of hex digits");
        const data = Buffer.from(req.hex, "hex");
        const digest = createHash("sha256").update(data).digest("hex");
        await store.putBlob(digest, data);
        return { digest, size: data.length };
      }
      case "get_blob": {
        void this.model;
        const data = Buffer.from(await store.getBlob(req.digest, req.size));
        if (data.length !== req.size || createHash("sha256").update(data).digest("hex") !== req.digest) {
          throw new Damaged(`blob ${req.digest}: the stored bytes do not match their reference`);
        }
        return { hex: data.toString("hex") };
      }
      case "close":
        if (!this.isOpen) throw new BadRequest("no session is open (send open first)");
        await this.close(); // also after a failed write: that is how to recover from one
        return {};
      default:
        throw new Unsupported(`${req.op} is not supported by this adapter`);
    }
  }

  async open(root, session, workspace, create) {
    if (this.isOpen) throw new BadRequest("a session is already open; close it first");
    if (create && workspace === null) throw new BadRequest("open with create needs a workspace");
    checkSessionId(session);
    const store = this.store;
    store.model = new store.modelClass();
    let records;
    try {
      records = await store.open(root, session, create);
    } catch (e) {
      await store.close();
      throw e;
    }
    this.isOpen = true;
    this.broken = null;
    try {
      if (create) {
        if (records.length) throw new Exists(`session '${session}' already exists in ${root}`);
        await this.write([{ type: "session_created", session_id: session, schema_version: 1, workspace: resolve(workspace) }]);
      } else {
        if (!records.length) throw new NotFound(`no session '${session}' in ${root}`);
        fold(records, store.model, `session '${session}'`);
        await this.bind(session, workspace);
      }
    } catch (e) {
      await this.close();
      throw e;
    }
    return { next_seq: store.model.nextSeq };
  }

  async bind(session, workspace) {
    const recorded = this.model.workspace ?? "";
    if (workspace !== null) {
      const to = resolve(workspace);
      if (to !== recorded) {
        if (!isDirectory(to)) throw new Invalid(`cannot rebind session '${session}' to ${to}: not a directory`);
        await this.write([{ type: "workspace_rebound", from: recorded, to }]);
      }
    } else if (!isDirectory(recorded)) {
      throw new Invalid(
        `the workspace of session '${session}' has moved: ${recorded} no longer exists; open it with the new workspace`,
      );
    }
  }

  async close() {
    this.isOpen = false;
    await this.store.close();
  }
}

/** Writes all of `text` to fd 1, synchronously (a reply is out before the next request is read). */
function writeOut(text) {
  const bytes = Buffer.from(text, "utf8");
  let done = 0;
  while (done < bytes.length) done += writeSync(1, bytes, done, bytes.length - done);
}

/** The lines of fd 0, read synchronously, without their line ends. */
function* stdinLines() {
  const chunk = Buffer.alloc(1 << 16);
  let pending = Buffer.alloc(0);
  for (;;) {
    const n = readSync(0, chunk, 0, chunk.length, null);
    if (n === 0) break;
    pending = Buffer.concat([pending, chunk.subarray(0, n)]);
    let nl;
    while ((nl = pending.indexOf(10)) !== -1) {
      let line = pending.subarray(0, nl);
      if (line.length && line[line.length - 1] === 13) line = line.subarray(0, line.length - 1);
      yield line;
      pending = pending.subarray(nl + 1);
    }
  }
  if (pending.length) yield pending;
}

/** Where an exception was thrown: `file:line` of its first stack frame. */
function whereOf(e) {
  const frame = String(e?.stack ?? "")
    .split("\n")
    .find((l) => l.trim().startsWith("at "));
  const m = frame && /\(?([^()\s]+:\d+):\d+\)?$/.exec(frame.trim());
  return m ? m[1] : "an unknown place";
}

/**
 * Serves `store` until stdin ends; resolves to the exit code:
 * `process.exitCode = await serve(new MyStore())`.
 */
export async function serve(store) {
  const unknown = store.capabilities().filter((c) => !CAPABILITIES.includes(c));
  const unbacked = unbackedClaims(store);
  if (unknown.length || unbacked.length) {
    const problems = [...unknown.map((c) => `unknown capability '${c}'`), ...unbacked.map((c) => `claims ${c}`)];
    process.stderr.write(`${store.name} adapter: ${problems.join("; ")}\n`);
    return 2;
  }
  const server = new Server(store);
  for (const line of stdinLines()) {
    let reply;
    try {
      reply = await server.handle(line);
    } catch (e) {
      // A bug, not an answer: one line on stderr, and the harness sees the
      // adapter end (a protocol error quoting this line).
      const what = e instanceof Error ? `${e.name}: ${oneLine(e.message)}` : oneLine(String(e));
      process.stderr.write(`${store.name} adapter: internal error (${what}) at ${whereOf(e)}\n`);
      return 2;
    }
    writeOut(reply);
  }
  if (server.isOpen) await server.close();
  return 0;
}
