#!/usr/bin/env python3
"""agentchaos adapter for LangGraph's SQLite checkpointer (protocol version 1).

Usage: python3 adapter.py [--recovery phases|rerun]

Speaks chaos/PROTOCOL.md on stdin/stdout through the Python adapter kit
(agentchaos_adapter, chaos/adapters/python); diagnostics go to stderr.
`--recovery phases` (the default) marks each call without a result with the
phase its pending writes show; `--recovery rerun` marks every such call
`requested`, which is all a stock LangGraph graph knows: the node runs again.
See README.md beside this file for the mapping and its limits.
"""

import sys

USAGE = "usage: adapter.py [--recovery phases|rerun]"
MODES = ("phases", "rerun")


def main(argv: list[str]) -> int:
    recovery = "phases"
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if arg == "--recovery" and args:
            recovery = args.pop(0)
        elif arg.startswith("--recovery="):
            recovery = arg.split("=", 1)[1]
        else:
            print(f"langgraph adapter: unexpected argument {arg!r}; {USAGE}", file=sys.stderr)
            return 2
    if recovery not in MODES:
        print(f"langgraph adapter: unknown recovery mode {recovery!r}; {USAGE}", file=sys.stderr)
        return 2
    try:
        from agentchaos_adapter import serve
        from lgadapter.store import ThreadStore
    except ImportError as e:
        print(
            f"langgraph adapter: cannot import its packages ({e}); install them: "
            "python3 -m pip install ./chaos/adapters/python -r chaos/adapters/langgraph/requirements.txt",
            file=sys.stderr,
        )
        return 3
    except RuntimeError as e:  # the kit's packaged schema is missing or unreadable
        print(f"langgraph adapter: {e}", file=sys.stderr)
        return 2
    return serve(ThreadStore(recovery))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
