#!/usr/bin/env node
// SqliteSaver acknowledges a checkpoint that a power cut can roll back.
//
// Standalone reproduction (the checkpointer alone, no harness):
//
//     npm install @langchain/langgraph-checkpoint-sqlite@1.0.4 @langchain/langgraph-checkpoint@1.2.2 @langchain/core@1.4.0
//     node wal_without_sync.mjs
//
// `SqliteSaver.setup()` turns on WAL (`journal_mode=WAL`) and leaves
// `synchronous` at the connection's default. better-sqlite3 builds SQLite
// with SQLITE_DEFAULT_WAL_SYNCHRONOUS=1, so in WAL mode that default is
// NORMAL: a commit appends to the WAL and returns without an fsync, and
// the WAL is synced only at a checkpoint. SQLite documents the cost: "A
// transaction committed in WAL mode with synchronous=NORMAL might roll
// back following a power loss or system crash." So `put` resolves, the
// graph moves on (a tool call made, a message sent), and after a power
// cut the thread is back at an older checkpoint, or empty. agentchaos's
// power-loss nemesis shows the loss (README.md beside this directory);
// this script shows the setting that causes it.
//
// Expected: synchronous=FULL (2) or EXTRA (3) on the saver's connection.
// Found: NORMAL (1).
//
// Exits 1 when the saver's commits are not synced (the finding
// reproduces), 0 otherwise.

import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

import Database from "better-sqlite3";
import { emptyCheckpoint, uuid6 } from "@langchain/langgraph-checkpoint";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";

const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "saver-")), "checkpoints.sqlite");
const db = new Database(file);
const saver = new SqliteSaver(db);
const config = { configurable: { thread_id: "conversation", checkpoint_ns: "" } };
await saver.put(config, { ...emptyCheckpoint(), id: uuid6(-1) }, { source: "input", step: -1, parents: {} }, {});
const journal = db.pragma("journal_mode", { simple: true });
const synchronous = db.pragma("synchronous", { simple: true });
if (journal === "wal" && synchronous < 2) {
  console.log(
    `put resolved with journal_mode=${journal} and synchronous=${synchronous} (NORMAL): ` +
      "the commit is not synced and a power cut may roll it back",
  );
  process.exitCode = 1;
} else {
  console.log(`put resolved with journal_mode=${journal} and synchronous=${synchronous}`);
}
