#!/usr/bin/env node
// The hello store, talkative: every call logs with console.log, .info and
// .debug and writes to process.stdout, as store libraries do. The kit
// keeps the wire clean: all of it lands on stderr, never among the replies.
//
// Usage: node noisy_store.mjs  (speaks chaos/PROTOCOL.md on stdin/stdout)

import { serve } from "agentchaos-adapter";

import { HelloStore } from "./hello_store.mjs";

function chatter(call) {
  console.log(`noisy store: console.log ${call}`);
  console.info(`noisy store: console.info ${call}`);
  console.debug(`noisy store: console.debug ${call}`);
  process.stdout.write(`noisy store: process.stdout.write ${call}\n`);
}

class NoisyStore extends HelloStore {
  constructor() {
    super();
    this.name = "noisy-store-node";
  }

  open(root, session, create) {
    chatter("open");
    return super.open(root, session, create);
  }

  write(records) {
    chatter("write");
    super.write(records);
  }

  close() {
    chatter("close");
    super.close();
  }
}

chatter("start");
process.exitCode = await serve(new NoisyStore());
