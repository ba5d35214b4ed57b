#!/usr/bin/env node
// A hello store for agentchaos: one fsync'd JSON-lines file per session.
//
// Usage: node hello_store.mjs  (speaks chaos/PROTOCOL.md on stdin/stdout)
// Imported, it is the class `HelloStore` (noisy_store.mjs extends it).
//
// ROOT/SESSION.jsonl: a record per line, acked once fsynced, a torn last
// line cut on open. Node has no flock, so no writer lock: not claimed, and
// neither are checkpoints, blobs or checksums. The kit keeps the rules,
// recovery, projection and context.

import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

import { Damaged, serve, Store } from "agentchaos-adapter";

function fsyncDir(dir) {
  const fd = fs.openSync(dir, "r");
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Creates `dir` and its missing parents, each durable in its parent. */
function makeDirs(dir) {
  dir = path.resolve(dir);
  if (fs.existsSync(dir)) return;
  makeDirs(path.dirname(dir));
  fs.mkdirSync(dir);
  fsyncDir(path.dirname(dir));
}

/**
 * Whether `piece` starts with a whole record and goes on: a torn write
 * leaves a prefix of one line, so that is two lines fused by damage.
 */
function wholeRecordThenMore(piece) {
  for (let end = piece.indexOf(0x7d); end >= 0 && end < piece.length - 1; end = piece.indexOf(0x7d, end + 1)) {
    try {
      JSON.parse(piece.subarray(0, end + 1).toString("utf8"));
      return true;
    } catch {
      // not a whole record yet
    }
  }
  return false;
}

export class HelloStore extends Store {
  constructor() {
    super();
    this.name = "hello-store-node";
    this.claims = ["durable_append", "torn_tail_repair", "orphan_marking", "effect_ledger", "branches", "compaction"];
    this.fd = null;
  }

  open(root, session, create) {
    const file = path.join(root, `${session}.jsonl`);
    if (!create && !fs.existsSync(file)) return [];
    makeDirs(root);
    this.fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_APPEND, 0o644);
    fsyncDir(root);
    const data = fs.readFileSync(file);
    const good = data.subarray(0, data.lastIndexOf(10) + 1); // cut a torn last line
    if (wholeRecordThenMore(data.subarray(good.length))) {
      throw new Damaged(
        `${file}: the unterminated piece at byte offset ${good.length} holds a whole record and more: damage, not a torn write`,
      );
    }
    if (good.length < data.length) {
      fs.ftruncateSync(this.fd, good.length);
      fs.fsyncSync(this.fd);
    }
    const lines = good.toString("utf8").split("\n").slice(0, -1);
    try {
      return lines.map((line) => JSON.parse(line));
    } catch (e) {
      throw new Damaged(`${file}: ${e.message}`);
    }
  }

  write(records) {
    const data = Buffer.from(records.map((r) => `${JSON.stringify(r)}\n`).join(""));
    for (let done = 0; done < data.length; ) done += fs.writeSync(this.fd, data, done);
    fs.fsyncSync(this.fd);
  }

  close() {
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }
}

if (process.argv[1] && fs.realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await serve(new HelloStore());
}
