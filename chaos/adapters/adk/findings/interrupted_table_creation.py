#!/usr/bin/env python3
"""A crash while DatabaseSessionService creates its tables wedges the database.

Standalone reproduction (google-adk and its SQLite driver only, no harness):

    python3 -m pip install google-adk==2.13.0 'sqlalchemy[asyncio]==2.1.9' aiosqlite==0.22.1
    python3 interrupted_table_creation.py

`prepare_tables` (run before the first call on a new database) creates
the tables in one transaction and writes the schema version into
`adk_internal_metadata` in a second one. A process killed between the two
leaves the tables without the version, and every later service on that
database refuses every call: "Schema version not found in
adk_internal_metadata. The database might be malformed." Nothing was
acknowledged yet, but the agent cannot start until someone deletes the
file by hand.

This script runs the first `create_session` in a child process that
SIGKILLs itself when the version transaction begins: the real table
creation, the real kill; only the moment is chosen. agentchaos's syscall
nemesis finds the same moment unaided (README.md beside this directory).

Expected: the next service creates or completes the schema (one
transaction for both, or a missing version written on open). Found: it
raises.

Exits 1 when the database is wedged (the finding reproduces), 0 otherwise.
"""

import asyncio
import os
import signal
import sys
import tempfile

from google.adk.sessions import DatabaseSessionService


def create_and_die_before_the_version(url: str) -> None:
    service = DatabaseSessionService(db_url=url)

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    # The tables' transaction has committed when the version's session opens.
    service._rollback_on_exception_session = die
    asyncio.run(service.create_session(app_name="app", user_id="user", session_id="conversation"))


async def reopen(url: str) -> str:
    service = DatabaseSessionService(db_url=url)
    try:
        await service.get_session(app_name="app", user_id="user", session_id="conversation")
        return ""
    except ValueError as e:
        return str(e)
    finally:
        await service.close()


def main() -> int:
    url = f"sqlite+aiosqlite:///{os.path.join(tempfile.mkdtemp(), 'sessions.db')}"
    pid = os.fork()
    if pid == 0:
        create_and_die_before_the_version(url)
        os._exit(0)  # not reached
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    error = asyncio.run(reopen(url))
    if error:
        print(f"after a SIGKILL inside the first create_session, every call raises: {error}")
        return 1
    print("after a SIGKILL inside the first create_session, the database opens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
