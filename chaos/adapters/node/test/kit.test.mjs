// Unit tests of the kit's serve loop over an in-memory store (node:test;
// the kit's own dependency, for the compiled validators' freshness):
// `node --test test/`. What a store's failures and bad
// data turn into; chaos/tests/node_kit.rs runs it.

import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeEach, test } from "node:test";

import { Invalid, IoFailed, Store } from "../src/index.js";
import { Server } from "../src/serve.js";

const sessions = new Map();

class MemoryStore extends Store {
  constructor() {
    super();
    this.name = "memory";
    this.claims = ["blobs"];
    this.fail = null;
    this.blobs = new Map();
  }
  open(root, session) {
    this.key = `${root}/${session}`;
    return [...(sessions.get(this.key) ?? [])];
  }
  async write(records) {
    if (this.fail !== null) {
      const fail = this.fail;
      this.fail = null;
      throw fail;
    }
    sessions.set(this.key, [...(sessions.get(this.key) ?? []), ...records]);
  }
  putBlob(digest, data) {
    this.blobs.set(digest, data);
  }
  getBlob(digest) {
    return this.blobs.get(digest);
  }
}

let tmp;
let store;
let server;
let nextId;

beforeEach(() => {
  sessions.clear();
  tmp = mkdtempSync(join(tmpdir(), "kit-"));
  store = new MemoryStore();
  server = new Server(store);
  nextId = 1;
});

async function req(op, fields = {}) {
  const line = Buffer.from(JSON.stringify({ id: nextId++, op, ...fields }));
  return JSON.parse(await server.handle(line));
}
async function ok(op, fields) {
  const reply = await req(op, fields);
  assert.ok("ok" in reply, JSON.stringify(reply));
  return reply.ok;
}
async function kind(op, fields) {
  const reply = await req(op, fields);
  assert.ok("error" in reply, JSON.stringify(reply));
  return reply.error.kind;
}
const create = () => ok("open", { root: tmp, session: "s", workspace: tmp, create: true });
const reopen = (op = ok) => op("open", { root: tmp, session: "s", workspace: null, create: false });
const msg = (text) => ({ event: { type: "user_message", parent: null, text } });

test("a failed write makes the session unusable until it is reopened", async () => {
  await create();
  store.fail = Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC", syscall: "write" });
  const reply = await req("append", msg("one"));
  assert.deepEqual(reply.error, { kind: "io", message: "write: ENOSPC: no space left on device, write" });
  assert.equal(await kind("append", msg("two")), "io");
  assert.equal(await kind("events"), "io");
  await ok("close");
  assert.equal((await reopen()).next_seq, 1);
  assert.equal((await ok("append", msg("two"))).seq, 1);
});

test("a refusal before writing keeps the session usable", async () => {
  await create();
  store.fail = new Invalid("cannot store it");
  assert.equal(await kind("append", msg("one")), "invalid");
  assert.equal((await ok("append", msg("one"))).seq, 1);
  store.fail = new IoFailed("disk said no");
  assert.equal(await kind("append", msg("two")), "io");
  assert.equal(await kind("projection"), "io");
});

test("rules are refused with their reason", async () => {
  await create();
  const reply = await req("append", { event: { type: "run_finished", run_id: "r9", status: "completed" } });
  assert.equal(reply.error.kind, "rule");
  assert.match(reply.error.message, /^rule violated: run_finished for run 'r9'/);
});

test("requests that do not fit the schema are bad requests naming the field", async () => {
  const reply = await req("open", { root: tmp, session: "s", create: "yes" });
  assert.equal(reply.error.kind, "bad_request");
  assert.match(reply.error.message, /^open: /);
  assert.equal(await kind("append", { event: { type: "user_message", parent: null, text: 3 } }), "bad_request");
  assert.equal(await kind("teleport"), "bad_request");
});

test("loaded records that do not fold are damage", async () => {
  await create();
  await ok("close");
  const key = `${tmp}/s`;
  sessions.get(key).push({ seq: 5, ts: null, event: msg("gap").event });
  assert.equal(await reopen(kind), "damage");
  sessions.get(key)[1] = { seq: 1, event: { type: "user_message", text: 3 } };
  assert.equal(await reopen(kind), "damage");
  sessions.get(key)[1] = { seq: 1, event: { type: "leaf_moved", leaf: "e0" } };
  assert.equal(await reopen(kind), "damage");
});

test("blobs are checked against their reference", async () => {
  await create();
  const ref = await ok("put_blob", { hex: "c0ffee" });
  assert.deepEqual(ref, { digest: createHash("sha256").update(Buffer.from("c0ffee", "hex")).digest("hex"), size: 3 });
  assert.deepEqual(await ok("get_blob", ref), { hex: "c0ffee" });
  store.blobs.set(ref.digest, Buffer.alloc(3));
  assert.equal(await kind("get_blob", ref), "damage");
});

test("the loop answers every line, and a bug ends it with one line and exit 2", () => {
  const buggy = `
    import { Store, serve } from ${JSON.stringify(new URL("../src/index.js", import.meta.url).href)};
    class Buggy extends Store {
      open() { return []; }
      write() { throw new TypeError("oops"); }
    }
    process.exitCode = await serve(new Buggy());`;
  const input =
    '{"id":1,"op":"hello","protocol":1}\n[]\n' +
    '{"id":3,"op":"open","root":"/r","session":"s","workspace":"/w","create":true}\n{"id":4,"op":"close"}\n';
  const out = spawnSync(process.execPath, ["--input-type=module", "-e", buggy], { input, encoding: "utf8" });
  assert.equal(out.status, 2, out.stderr);
  assert.match(out.stderr, /^node-store adapter: internal error \(TypeError: oops\) at \S+:\d+\n$/);
  const lines = out.stdout.split("\n").filter(Boolean);
  assert.equal(lines.length, 2, out.stdout);
  assert.deepEqual(JSON.parse(lines[1]), { id: null, error: { kind: "bad_request", message: "a request is a JSON object" } });
});

test("unknown and unbacked claims stop the adapter with one line", () => {
  const store = `
    import { Store, serve } from ${JSON.stringify(new URL("../src/index.js", import.meta.url).href)};
    class S extends Store { constructor() { super(); this.claims = ["blobs", "teleport"]; } }
    process.exitCode = await serve(new S());`;
  const out = spawnSync(process.execPath, ["--input-type=module", "-e", store], { input: "", encoding: "utf8" });
  assert.equal(out.status, 2);
  assert.equal(out.stdout, "");
  assert.equal(out.stderr.trim(), "node-store adapter: unknown capability 'teleport'; claims blobs (needs putBlob, getBlob)");
});


test("a store that prints and logs on every call leaves the wire to the kit", () => {
  const requests = [
    { op: "hello", protocol: 1 },
    { op: "open", root: tmp, session: "s", workspace: tmp, create: true },
    { op: "append", event: { type: "user_message", parent: null, text: "hi" } },
    { op: "close" },
    { op: "open", root: tmp, session: "s", workspace: null, create: false },
    { op: "events" },
  ].map((r, i) => JSON.stringify({ id: i + 1, ...r }));
  const noisy = fileURLToPath(new URL("../examples/noisy_store.mjs", import.meta.url));
  const out = spawnSync(process.execPath, [noisy], { input: `${requests.join("\n")}\n`, encoding: "utf8" });
  assert.equal(out.status, 0, out.stderr);
  const replies = out.stdout.split("\n").filter(Boolean).map((line) => JSON.parse(line));
  assert.deepEqual(replies.map((r) => [r.id, "ok" in r]), requests.map((_, i) => [i + 1, true]), out.stdout);
  assert.equal(replies[5].ok.records.length, 2);
  for (const how of ["console.log", "console.info", "console.debug", "process.stdout.write"]) {
    assert.match(out.stderr, new RegExp(`noisy store: ${how.replace(".", "\\.")} write`), out.stderr);
  }
});

test("the kit never makes fd 1 non-blocking (its replies are synchronous writes)", () => {
  const probe = `
    import ${JSON.stringify(new URL("../src/index.js", import.meta.url).href)};
    import { readFileSync } from "node:fs";
    console.log("printed");
    process.stdout.write("written\\n");
    const flags = /flags:\\s+(\\d+)/.exec(readFileSync("/proc/self/fdinfo/1", "utf8"))[1];
    process.stderr.write(\`O_NONBLOCK \${(parseInt(flags, 8) & 0o4000) !== 0}\\n\`);`;
  const out = spawnSync(process.execPath, ["--input-type=module", "-e", probe], { encoding: "utf8" });
  assert.equal(out.status, 0, out.stderr);
  assert.equal(out.stdout, "");
  assert.equal(out.stderr, "printed\nwritten\nO_NONBLOCK false\n");
});

test("the compiled validators are what the generator makes of the packaged schema", async () => {
  const { generate, SCHEMA_FILE, VALIDATORS_FILE } = await import("../scripts/generate-validators.mjs");
  const { readFileSync } = await import("node:fs");
  const fresh = generate(JSON.parse(readFileSync(SCHEMA_FILE, "utf8")));
  assert.ok(
    fresh === readFileSync(VALIDATORS_FILE, "utf8"),
    "src/validators.js is stale: run `node scripts/generate-validators.mjs` in chaos/adapters/node",
  );
  // A schema with one more op makes another file: the comparison can fail.
  const grown = JSON.parse(readFileSync(SCHEMA_FILE, "utf8"));
  const extra = structuredClone(grown.$defs.RequestLine.oneOf[0]);
  extra.properties.op.const = "an_op_of_tomorrow";
  grown.$defs.RequestLine.oneOf.push(extra);
  assert.notEqual(generate(grown), fresh);
});
