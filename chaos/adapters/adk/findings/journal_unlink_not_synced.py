#!/usr/bin/env python3
"""DatabaseSessionService on SQLite commits by an unlink it never syncs.

Standalone reproduction (google-adk and its SQLite driver only, no harness):

    python3 -m pip install google-adk==2.13.0 'sqlalchemy[asyncio]==2.1.9' aiosqlite==0.22.1
    python3 journal_unlink_not_synced.py

The service opens SQLite with its defaults: a rollback journal
(`journal_mode=DELETE`) and `synchronous=FULL`. In that mode a transaction
commits when its journal file is deleted, and FULL does not sync the
directory after the delete; SQLite's documentation says what is missing:
"EXTRA synchronous is like FULL with the addition that the directory
containing a rollback journal is synced after that journal is unlinked to
commit a transaction in DELETE mode. EXTRA provides additional durability
if the commit is followed closely by a power loss." So `append_event`
returns, and after a power cut the unlink may be undone: the journal is
back, hot, and the next open rolls the acknowledged event back.
agentchaos's power-loss nemesis shows the loss (README.md beside this
directory); this script shows the settings that cause it.

Expected: `synchronous=EXTRA` (3) in DELETE mode, or WAL with FULL.
Found: DELETE with FULL (2).

Exits 1 when the commit's unlink is not synced (the finding reproduces),
0 otherwise.
"""

import asyncio
import os
import sys
import tempfile

from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService
from google.genai import types


async def main() -> int:
    path = os.path.join(tempfile.mkdtemp(), "sessions.db")
    service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
    session = await service.create_session(app_name="app", user_id="user", session_id="conversation")
    content = types.Content(role="user", parts=[types.Part(text="deploy build 41")])
    await service.append_event(session, Event(author="user", content=content))
    async with service.db_engine.connect() as conn:
        journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
        synchronous = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
    await service.close()
    if journal == "delete" and synchronous < 3:
        print(
            f"append_event committed with journal_mode={journal} and synchronous={synchronous} (FULL): "
            "the journal's unlink that commits it is not synced, and a power cut may roll it back"
        )
        return 1
    print(f"append_event committed with journal_mode={journal} and synchronous={synchronous}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
