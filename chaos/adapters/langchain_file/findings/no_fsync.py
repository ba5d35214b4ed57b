#!/usr/bin/env python3
"""FileChatMessageHistory acknowledges a message without ever calling fsync.

Standalone reproduction (langchain-community only, no harness):

    python3 -m pip install langchain-community==0.4.2
    python3 no_fsync.py

`add_message` rewrites the history file in place and returns: no fsync of
the file, none of its directory. After a power cut (or a kernel crash)
the file may be empty, torn at a sector boundary, or missing: the
acknowledged messages are gone, and a torn file does not parse.
agentchaos's power-loss nemesis shows all three (README.md beside this
directory); this script shows the cause, counting the syscalls Python
would make to sync anything.

Expected: the data synced before `add_message` returns. Found: none.

Exits 1 when no sync happens (the finding reproduces), 0 otherwise.
"""

import os
import sys
import tempfile
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # the package's sunset notice
    from langchain_community.chat_message_histories import FileChatMessageHistory
from langchain_core.messages import HumanMessage

calls = []
for name in ("fsync", "fdatasync", "sync"):
    real = getattr(os, name)

    def counting(*args, _name=name, _real=real):
        calls.append(_name)
        return _real(*args)

    setattr(os, name, counting)


def main() -> int:
    history = FileChatMessageHistory(os.path.join(tempfile.mkdtemp(), "history.json"))
    calls.clear()
    history.add_message(HumanMessage(content="deploy build 41"))
    if calls:
        print(f"add_message synced: {calls}")
        return 0
    print("add_message returned after 0 fsync/fdatasync/sync calls: the message is not durable")
    return 1


if __name__ == "__main__":
    sys.exit(main())
