#!/usr/bin/env node
// agentchaos adapter for LangGraph.js's SQLite checkpointer (protocol version 1).
//
// Usage: node adapter.mjs  (speaks chaos/PROTOCOL.md on stdin/stdout through
// the Node adapter kit, chaos/adapters/node; diagnostics go to stderr)
//
// The mapping, through the checkpointer's public API only (`SqliteSaver`'s
// `put` and `getTuple`): the root holds one database, `checkpoints.sqlite`;
// the protocol session is the LangGraph thread of the same id; the records
// are the thread's state, one channel `records` holding them all, as a
// graph's message list is. A write is one `put` of a new checkpoint whose
// parent is the last one, with the records so far plus the new ones, as a
// graph's superstep writes its whole state; open reads the latest
// checkpoint (`getTuple` with no checkpoint id).
//
// Claimed: `durable_append` (a checkpoint is committed when `put` returns;
// the crash and power rows judge whether it survives) and what the kit's
// fold adds over the durable records. Not claimed: `writer_lock` (none),
// `damage_refusal` (no checksums of its own; SQLite's page checks are not
// a promise), `torn_tail_repair` (no log), checkpoints and blobs of the
// protocol's kind.

import { createRequire } from "node:module";
import * as fs from "node:fs";
import * as path from "node:path";

import Database from "better-sqlite3";
import { emptyCheckpoint, uuid6 } from "@langchain/langgraph-checkpoint";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";
import { Damaged, serve, Store } from "agentchaos-adapter";

const require = createRequire(import.meta.url);
const saverVersion = require("@langchain/langgraph-checkpoint-sqlite/package.json").version;

class CheckpointStore extends Store {
  constructor() {
    super();
    this.name = "langgraphjs-sqlite-saver";
    this.version = `@langchain/langgraph-checkpoint-sqlite ${saverVersion}`;
    this.claims = ["durable_append", "orphan_marking", "effect_ledger", "branches", "compaction"];
    this.saver = null;
    this.config = null;
    this.records = [];
  }

  async open(root, session, create) {
    const file = path.join(root, "checkpoints.sqlite");
    if (!create && !fs.existsSync(file)) return [];
    fs.mkdirSync(root, { recursive: true });
    let latest;
    try {
      this.saver = new SqliteSaver(new Database(file));
      this.config = { configurable: { thread_id: session, checkpoint_ns: "" } };
      latest = await this.saver.getTuple(this.config);
    } catch (e) {
      if (e.code && String(e.code).startsWith("SQLITE_")) throw new Damaged(`${file}: ${e.message}`);
      throw e;
    }
    if (latest === undefined) {
      this.records = [];
      return [];
    }
    this.config = latest.config;
    const records = latest.checkpoint.channel_values.records;
    if (!Array.isArray(records)) {
      throw new Damaged(`${file}: checkpoint ${latest.config.configurable.checkpoint_id} has no records channel`);
    }
    this.records = records;
    return records;
  }

  async write(records) {
    const all = this.records.concat(records);
    const checkpoint = {
      ...emptyCheckpoint(),
      id: uuid6(-1),
      channel_values: { records: all },
      channel_versions: { records: all.length },
    };
    const metadata = { source: "loop", step: all.length, parents: {} };
    this.config = await this.saver.put(this.config, checkpoint, metadata, { records: all.length });
    this.records = all;
  }

  close() {
    this.saver?.db.close();
    this.saver = null;
  }
}

process.exitCode = await serve(new CheckpointStore());
