#!/usr/bin/env python3
"""A crash inside `add_message` erases the whole chat history.

Standalone reproduction (langchain-community only, no harness):

    python3 -m pip install langchain-community==0.4.2
    python3 truncate_then_write.py

`FileChatMessageHistory.add_message` reads the file, appends the message
and writes the whole list back with `Path.write_text`: an `open` with
O_TRUNC, then one `write`. A process killed between the two (SIGKILL, an
OOM kill, a container stop) leaves an empty file: every message
acknowledged before is gone, and every later `.messages` raises
JSONDecodeError, so the history cannot even be read to start over.

This script adds three messages, then adds a fourth in a child process
that SIGKILLs itself right after the truncating `open` returns: the real
open, the real kill; only the moment is chosen. agentchaos's syscall
nemesis finds the same moment unaided (README.md beside this directory).

Expected: the three acknowledged messages still there (a write to a
temporary file renamed over the history, or an append). Found: none.

Exits 1 when the history is lost (the finding reproduces), 0 otherwise.
"""

import os
import pathlib
import signal
import sys
import tempfile
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # the package's sunset notice
    from langchain_community.chat_message_histories import FileChatMessageHistory
from langchain_core.messages import HumanMessage


def add_and_die_after_truncation(path: str) -> None:
    real_open = pathlib.Path.open

    def open_then_die(self, mode="r", *args, **kwargs):
        f = real_open(self, mode, *args, **kwargs)
        if "w" in mode:
            os.kill(os.getpid(), signal.SIGKILL)
        return f

    pathlib.Path.open = open_then_die
    FileChatMessageHistory(path).add_message(HumanMessage(content="message 4"))


def main() -> int:
    path = os.path.join(tempfile.mkdtemp(), "history.json")
    history = FileChatMessageHistory(path)
    for i in range(1, 4):
        history.add_message(HumanMessage(content=f"message {i}"))
    pid = os.fork()
    if pid == 0:
        add_and_die_after_truncation(path)
        os._exit(0)  # not reached
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    try:
        messages = FileChatMessageHistory(path).messages
    except ValueError as e:
        print(f"after a SIGKILL inside add_message, .messages raised {type(e).__name__}: {e}; "
              f"the 3 acknowledged messages are gone ({os.path.getsize(path)}-byte file)")
        return 1
    print(f"after a SIGKILL inside add_message, {len(messages)} messages read back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
