#!/usr/bin/env python3
"""agentchaos adapter for the OpenAI Agents SDK's `SQLiteSession` (protocol version 1).

Usage: python3 adapter.py

Speaks chaos/PROTOCOL.md on stdin/stdout through the Python adapter kit
(agentchaos_adapter, chaos/adapters/python); diagnostics go to stderr.

The mapping, through the store's public API only (`SQLiteSession`,
`get_items`, `add_items`, `close`): one SQLite file per root,
`ROOT/agents.sqlite`; the protocol session is the SDK session of the same
id; each protocol record `{seq, ts, event}` is one session item, stored
as the SDK stores any item (its JSON in `agent_messages`). `open` reads
`get_items()`; a `write` is one `add_items(records)`, a single SQLite
transaction the SDK commits before it returns (WAL, `synchronous` left
at SQLite's compiled default). Nothing is kept that the SDK does not
keep; the kit's fold (chaos/adapters/python) keeps the session rules,
recovery marks, projection and context from the items, a thin layer the
SDK has no notion of.

Claimed: what the SDK's transaction and the kit's fold honestly give.
Not claimed: `writer_lock` (the SDK's lock is a threading lock inside one
process; a second process writes the same session freely),
`damage_refusal` (`get_items` skips a row whose JSON does not parse:
findings/skipped_row.py), `torn_tail_repair` (SQLite's own journal, not
the store's cut, and no log the harness could tear), checkpoints and
blobs (no such API).
"""

import asyncio
import os
import sqlite3
import sys

USAGE = "usage: adapter.py"
DB_FILE = "agents.sqlite"


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if argv:
        print(f"openai-agents adapter: unexpected argument {argv[0]!r}; {USAGE}", file=sys.stderr)
        return 2
    try:
        import agents
        from agents.memory import SQLiteSession
        from agentchaos_adapter import Damaged, Store, serve
    except ImportError as e:
        print(
            f"openai-agents adapter: cannot import its packages ({e}); install them: "
            "python3 -m pip install ./chaos/adapters/python -r chaos/adapters/openai_agents/requirements.txt",
            file=sys.stderr,
        )
        return 3
    except RuntimeError as e:  # the kit's packaged schema is missing or unreadable
        print(f"openai-agents adapter: {e}", file=sys.stderr)
        return 2

    class SessionStore(Store):
        name = "openai-agents-sqlite-session"
        version = f"openai-agents {agents.__version__}, sqlite {sqlite3.sqlite_version}"
        claims = ("durable_append", "orphan_marking", "effect_ledger", "branches", "compaction")
        session = None

        def open(self, root, session, create):
            path = os.path.join(root, DB_FILE)
            if not create and not os.path.exists(path):
                return []
            os.makedirs(root, exist_ok=True)
            self.session = SQLiteSession(session, path)
            items = asyncio.run(self.session.get_items())
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    raise Damaged(f"{path}: item {i} of session {session!r} is not a record")
            return items

        def write(self, records):
            asyncio.run(self.session.add_items(records))

        def close(self):
            if self.session is not None:
                self.session.close()
            self.session = None

    return serve(SessionStore())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
