#!/usr/bin/env python3
"""A hello store for agentchaos: one fsync'd JSON-lines file per session.

Usage: python3 hello_store.py  (speaks chaos/PROTOCOL.md on stdin/stdout)

ROOT/SESSION.jsonl: a record per line, acked once fsynced, a torn last line
cut on open; ROOT/SESSION.lock flocked while open. The kit keeps the rules,
recovery, projection and context. No checkpoints, blobs, checksums: not claimed.
"""

import fcntl
import json
import os
import sys

from agentchaos_adapter import Damaged, Locked, Store, serve


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path):
    """Creates `path` and its missing parents, each durable in its parent."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        make_dirs(os.path.dirname(path))
        os.makedirs(path, exist_ok=True)
        fsync_dir(os.path.dirname(path))


def whole_record_then_more(piece):
    """Whether `piece` starts with a whole record and goes on: a torn write
    leaves a prefix of one line, so that is two lines fused by damage."""
    try:
        text = piece.decode()
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return False
    return end < len(text)


class HelloStore(Store):
    name = "hello-store"
    claims = ("durable_append", "torn_tail_repair", "orphan_marking", "effect_ledger",
              "branches", "compaction", "writer_lock")
    fd = lock = None

    def open(self, root, session, create):
        path = os.path.join(root, session + ".jsonl")
        if not create and not os.path.exists(path):
            return []
        make_dirs(root)
        self.lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Locked(f"{path} is open in another process") from None
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(root)
        with open(path, "rb") as f:
            data = f.read()
        good = data[: data.rfind(b"\n") + 1]  # cut a torn last line
        if whole_record_then_more(data[len(good):]):
            raise Damaged(f"{path}: the unterminated piece at byte offset {len(good)} "
                          "holds a whole record and more: damage, not a torn write")
        if len(good) < len(data):
            os.ftruncate(self.fd, len(good))
            os.fsync(self.fd)
        try:
            return [json.loads(line) for line in good.splitlines()]
        except ValueError as e:
            raise Damaged(f"{path}: {e}") from None

    def write(self, records):
        data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
        while data:
            data = data[os.write(self.fd, data):]
        os.fsync(self.fd)

    def close(self):
        for fd in (self.fd, self.lock):
            if fd is not None:
                os.close(fd)
        self.fd = self.lock = None


if __name__ == "__main__":
    sys.exit(serve(HelloStore()))
