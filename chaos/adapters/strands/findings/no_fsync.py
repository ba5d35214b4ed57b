#!/usr/bin/env python3
"""FileSessionManager acknowledges a message without ever calling fsync.

Standalone reproduction (strands-agents only, no harness):

    python3 -m pip install strands-agents==1.62.0
    python3 no_fsync.py

`create_message` writes the message to a temporary file, renames it into
place and returns: no fsync of the file, none of its directory. After a
power cut (or a kernel crash) the rename may be on disk while the data is
not: the message file is empty, `list_messages` raises "Invalid JSON in
file …/message_N.json" and the whole session is unreadable; or the file
is missing and the acknowledged message is gone. agentchaos's power-loss
nemesis shows both (README.md beside this directory); this script shows
the cause, counting the syscalls Python would make to sync anything.

Expected: the file and its directory synced before `create_message`
returns (write, fsync, rename, fsync of the directory). Found: none.

Exits 1 when no sync happens (the finding reproduces), 0 otherwise.
"""

import os
import sys
import tempfile

from strands.session.file_session_manager import FileSessionManager
from strands.types.session import SessionAgent, SessionMessage

calls = []
for name in ("fsync", "fdatasync", "sync"):
    real = getattr(os, name)

    def counting(*args, _name=name, _real=real):
        calls.append(_name)
        return _real(*args)

    setattr(os, name, counting)


def main() -> int:
    manager = FileSessionManager("conversation", storage_dir=tempfile.mkdtemp())
    manager.create_agent("conversation", SessionAgent(agent_id="agent", state={}, conversation_manager_state={}))
    calls.clear()
    message = {"role": "user", "content": [{"text": "deploy build 41"}]}
    manager.create_message("conversation", "agent", SessionMessage(message=message, message_id=0))
    if calls:
        print(f"create_message synced: {calls}")
        return 0
    print("create_message returned after 0 fsync/fdatasync/sync calls: the message is not durable")
    return 1


if __name__ == "__main__":
    sys.exit(main())
