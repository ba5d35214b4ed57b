#!/usr/bin/env python3
"""agentchaos adapter for Google ADK's `DatabaseSessionService` on SQLite (protocol version 1).

Usage: chaos/adapters/adk/.venv/bin/python adapter.py

Speaks chaos/PROTOCOL.md on stdin/stdout through the Python adapter kit
(agentchaos_adapter, chaos/adapters/python); diagnostics go to stderr.

The mapping, through the service's public API only (`create_session`,
`get_session`, `append_event`): the root holds one database,
`sessions.db`, opened as `sqlite+aiosqlite:///<root>/sessions.db`; the
protocol session is the ADK session of the same id (app `agentchaos`,
user `agent`); each protocol record `{seq, ts, event}` is one ADK `Event`
whose content is one text part holding the record's JSON. A write is one
`append_event` per record (one SQLAlchemy transaction each). Every call
runs on one event loop that lives as long as the process, as in a real
agent server.

Claimed: `durable_append` (an event is committed when `append_event`
returns) and what the kit's fold adds over the durable records. Not
claimed: `writer_lock` (its lock is per process: `_with_session_lock`),
`damage_refusal` (no checksums of its own), `torn_tail_repair` (no log),
checkpoints and blobs.
"""

import asyncio
import json
import os
import sqlite3
import sys

USAGE = "usage: adapter.py"
DB_FILE = "sessions.db"
APP = "agentchaos"
USER = "agent"


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if argv:
        print(f"adk adapter: unexpected argument {argv[0]!r}; {USAGE}", file=sys.stderr)
        return 2
    try:
        from importlib.metadata import version as package_version

        from google.adk.events import Event
        from google.adk.sessions import DatabaseSessionService
        from google.genai import types
        from agentchaos_adapter import Damaged, Store, serve
    except ImportError as e:
        print(
            f"adk adapter: cannot import its packages ({e}); install them into its own environment: "
            "python3 -m venv chaos/adapters/adk/.venv && chaos/adapters/adk/.venv/bin/python -m pip install "
            "./chaos/adapters/python -r chaos/adapters/adk/requirements.txt",
            file=sys.stderr,
        )
        return 3
    except RuntimeError as e:  # the kit's packaged schema is missing or unreadable
        print(f"adk adapter: {e}", file=sys.stderr)
        return 2

    class SessionStore(Store):
        name = "google-adk-database-session-service"
        version = (
            f"google-adk {package_version('google-adk')}, sqlalchemy {package_version('sqlalchemy')}, "
            f"aiosqlite {package_version('aiosqlite')}, sqlite {sqlite3.sqlite_version}"
        )
        claims = ("durable_append", "orphan_marking", "effect_ledger", "branches", "compaction")
        # Made in the process that serves a session, never in the fork
        # server: a loop's selector is an epoll instance, which every
        # forked child would share with the others alive at once, each
        # woken for the others' descriptors.
        loop = None
        service = None
        session = None

        def run(self, call):
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            return self.loop.run_until_complete(call)

        def open(self, root, session, create):
            path = os.path.join(root, DB_FILE)
            if not create and not os.path.exists(path):
                return []
            os.makedirs(root, exist_ok=True)
            try:
                self.service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
                self.session = self.run(self.service.get_session(app_name=APP, user_id=USER, session_id=session))
                if self.session is None:
                    if not create:
                        return []
                    self.session = self.run(
                        self.service.create_session(app_name=APP, user_id=USER, session_id=session)
                    )
            except ValueError as e:  # the service's own refusal, e.g. "Schema version not found"
                raise Damaged(f"{path}: {e}") from None
            except Exception as e:  # SQLAlchemy wraps sqlite3's errors (a malformed file, a bad row)
                if type(e).__module__.startswith(("sqlalchemy", "sqlite3")):
                    raise Damaged(f"{path}: {type(e).__name__}: {e}") from None
                raise
            records = []
            for i, event in enumerate(self.session.events):
                try:
                    (part,) = event.content.parts
                    records.append(json.loads(part.text))
                except (AttributeError, TypeError, ValueError) as e:
                    raise Damaged(f"{path}: event {i} of session {session!r} is not a record: {e}") from None
            return records

        def write(self, records):
            for r in records:
                content = types.Content(role="user", parts=[types.Part(text=json.dumps(r))])
                event = Event(author="user", invocation_id=f"seq-{r['seq']}", content=content)
                self.run(self.service.append_event(self.session, event))

        def close(self):
            if self.service is not None:
                self.run(self.service.close())
            self.service = self.session = None

    return serve(SessionStore())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
