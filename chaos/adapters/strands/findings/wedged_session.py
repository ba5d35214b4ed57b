#!/usr/bin/env python3
"""A crash inside session creation leaves a session id that can never be used.

Standalone reproduction (strands-agents only, no harness):

    python3 -m pip install strands-agents==1.62.0
    python3 wedged_session.py

`create_session` makes the session's directories first and writes
`session.json` after them. A crash between the two (SIGKILL, or a power
cut that keeps the directories and loses the file, since nothing is
synced) leaves `session_<id>/` without `session.json`. From then on every
`FileSessionManager(<id>)` raises "Session <id> already exists": the
manager reads no session, tries to create it, and refuses because the
directory exists. Neither opening nor creating works until someone
deletes the directory by hand.

Expected: an interrupted creation is either finished or taken as "no
session yet". Found: SessionException on every later attempt.

Exits 1 when the session is wedged (the finding reproduces), 0 otherwise.
"""

import os
import sys
import tempfile

from strands.session.file_session_manager import FileSessionManager
from strands.types.exceptions import SessionException


def main() -> int:
    storage = tempfile.mkdtemp()
    # What create_session has done when the crash comes before session.json.
    for d in ("agents", "multi_agents"):
        os.makedirs(os.path.join(storage, "session_conversation", d))
    try:
        FileSessionManager("conversation", storage_dir=storage)
    except SessionException as e:
        print(f"FileSessionManager('conversation') raised: {e}")
        return 1
    print("the interrupted session was opened or finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
