#!/usr/bin/env python3
"""The hello store, talkative: every call prints, logs, writes to fd 1 and
has C's stdio print too, as store libraries do. The kit keeps the wire
clean: all of it lands on stderr, never among the replies.

Usage: python3 noisy_store.py  (speaks chaos/PROTOCOL.md on stdin/stdout)
"""

import ctypes
import logging
import os
import sys

# A library that configures logging on stdout before the kit is imported.
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="noisy store: logged %(message)s")

from agentchaos_adapter import serve  # noqa: E402
from hello_store import HelloStore  # noqa: E402

libc = ctypes.CDLL(None)


def chatter(call):
    print(f"noisy store: printed {call}")
    logging.info(call)
    os.write(1, f"noisy store: wrote {call} to fd 1\n".encode())
    libc.printf(f"noisy store: C printf {call}\n".encode())
    libc.fflush(None)


class NoisyStore(HelloStore):
    name = "noisy-store"

    def open(self, root, session, create):
        chatter("open")
        return super().open(root, session, create)

    def write(self, records):
        chatter("write")
        super().write(records)

    def close(self):
        chatter("close")
        super().close()


if __name__ == "__main__":
    chatter("start")
    sys.exit(serve(NoisyStore()))
