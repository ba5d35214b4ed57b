"""The wire: the process's stdout, which carries the protocol's replies.

Owns fd 1 as the process started with it. Importing the kit calls `take`:
the kit keeps a private duplicate of fd 1 (close-on-exec, so no child
process inherits it) for its replies, and points fd 1, `sys.stdout` and
any root `logging` handler on stdout at stderr. Whatever a store or its
libraries print afterwards, from Python or from C, lands on stderr and
can never put a line on the wire that the harness would read as a reply.
Import the kit before the store's own modules for their import-time
output to be covered too.

It must never write to the wire itself (`serve` does, one reply per
line) and never close stderr. A tool that imports the kit and reports on
stdout (the self-test) calls `release` first: it is no adapter.
"""

from __future__ import annotations

import os
import sys
from typing import BinaryIO

# The wire while the kit holds it, and the `sys.stdout` it replaced.
_wire: BinaryIO | None = None
_stdout = sys.stdout


def take() -> None:
    """Takes the wire (once): fd 1, `sys.stdout` and root logging
    handlers on stdout go to stderr from now on."""
    global _wire, _stdout
    if _wire is not None:
        return
    try:
        fd = os.dup(1)
    except OSError:  # no stdout at all: no wire to protect
        return
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr either: what the store prints goes nowhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    _wire = open(fd, "wb")
    _stdout = sys.stdout
    sys.stdout = sys.stderr
    if _stdout is not None:
        # What was printed before the kit's import and is still buffered
        # goes out now, through fd 1: to stderr.
        _stdout.flush()
    quiet_logging()


def quiet_logging() -> None:
    """Points root logging handlers that write to stdout at stderr
    (`serve` calls it again once the store's modules have configured
    logging)."""
    logging = sys.modules.get("logging")
    if logging is None or _wire is None:
        return
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in (_stdout, sys.__stdout__):
            handler.setStream(sys.stderr)


def out() -> BinaryIO:
    """Where replies go: the wire, or stdout when the kit does not hold it."""
    return _wire if _wire is not None else sys.stdout.buffer


def rebind(stdout_fd: int, stderr_fd: int) -> None:
    """In a child of the fork server: the wire becomes `stdout_fd` (the
    child's own stdout, sent with `fork`), and fd 1 and fd 2 `stderr_fd`.
    The server's wire is never written by a child."""
    global _wire
    if _wire is None:
        _wire = open(os.dup(stdout_fd), "wb")
    else:
        os.dup2(stdout_fd, _wire.fileno(), inheritable=False)
    os.dup2(stderr_fd, 1)
    os.dup2(stderr_fd, 2)


def release() -> None:
    """Gives fd 1 and `sys.stdout` back, for a process that is no adapter."""
    global _wire
    if _wire is None:
        return
    sys.stdout.flush()
    os.dup2(_wire.fileno(), 1)
    _wire.close()
    _wire = None
    sys.stdout = _stdout
