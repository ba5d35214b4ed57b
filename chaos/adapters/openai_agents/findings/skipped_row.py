#!/usr/bin/env python3
"""A damaged item is silently dropped by SQLiteSession.get_items.

Standalone reproduction (openai-agents only, no harness):

    python3 -m pip install openai-agents==0.24.0
    python3 skipped_row.py

Two items are added and committed. One stored row is then damaged the way
a torn or bit-flipped page, a partial copy or a bad migration leaves it
(its JSON no longer parses). `get_items()` returns the other item and no
error: the session reads back shorter, and nothing tells the agent that
part of its history is gone. With the newest row damaged, what is left is
a perfectly plausible older history; an agent resumed from it repeats
work whose record it lost (a tool call with a side effect runs again).

Expected (what a session store should do): refuse to load, naming the
row, as SQLite itself does for a malformed page. Found: the row skipped
(`# Skip invalid JSON entries` in sqlite_session.py).

Exits 1 when the row is dropped silently (the finding reproduces), 0 if
get_items refuses.
"""

import asyncio
import os
import sqlite3
import sys
import tempfile

from agents.memory import SQLiteSession


async def main() -> int:
    path = os.path.join(tempfile.mkdtemp(), "agents.sqlite")
    session = SQLiteSession("conversation", path)
    await session.add_items(
        [
            {"role": "user", "content": "deploy build 41"},
            {"role": "assistant", "content": "deployed build 41 (deploy id d-41)"},
        ]
    )
    session.close()

    db = sqlite3.connect(path)
    db.execute("UPDATE agent_messages SET message_data = substr(message_data, 1, 20) WHERE id = 2")
    db.commit()
    db.close()

    session = SQLiteSession("conversation", path)
    try:
        items = await session.get_items()
    except Exception as e:  # the behaviour we would want
        print(f"get_items refused the damaged row: {e}")
        return 0
    finally:
        session.close()
    print(f"get_items returned {len(items)} of 2 committed items, without an error: {items}")
    return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
