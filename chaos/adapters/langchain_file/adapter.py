#!/usr/bin/env python3
"""agentchaos adapter for LangChain's `FileChatMessageHistory` (protocol version 1).

Usage: python3 adapter.py

Speaks chaos/PROTOCOL.md on stdin/stdout through the Python adapter kit
(agentchaos_adapter, chaos/adapters/python); diagnostics go to stderr.

The mapping, through the store's public API only (`FileChatMessageHistory`,
its `messages` and `add_message`): the protocol session `<id>` is the file
`<root>/<id>.json`; each protocol record `{seq, ts, event}` is one
`HumanMessage` whose content is the record's JSON. A write is one
`add_message` per record: the class reads the file, appends the message and
writes the whole list back with `Path.write_text` (open with O_TRUNC, one
write, close).

Claimed: `durable_append` (a message is in the file when `add_message`
returns; the process-crash and power rows judge whether it survives) and
what the kit's fold adds over the durable records. Not claimed:
`writer_lock` (none), `damage_refusal` (no checksums), `torn_tail_repair`
(no log: the file is rewritten whole), checkpoints and blobs.
"""

import json
import os
import sys

USAGE = "usage: adapter.py"


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if argv:
        print(f"langchain_file adapter: unexpected argument {argv[0]!r}; {USAGE}", file=sys.stderr)
        return 2
    try:
        import warnings
        from importlib.metadata import version as package_version

        with warnings.catch_warnings():
            # langchain-community warns on import that it is being sunset.
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.chat_message_histories import FileChatMessageHistory
        from langchain_core.messages import HumanMessage
        from agentchaos_adapter import Damaged, Store, serve
    except ImportError as e:
        print(
            f"langchain_file adapter: cannot import its packages ({e}); install them: "
            "python3 -m pip install ./chaos/adapters/python -r chaos/adapters/langchain_file/requirements.txt",
            file=sys.stderr,
        )
        return 3
    except RuntimeError as e:  # the kit's packaged schema is missing or unreadable
        print(f"langchain_file adapter: {e}", file=sys.stderr)
        return 2

    class FileStore(Store):
        name = "langchain-file-chat-message-history"
        version = f"langchain-community {package_version('langchain-community')}"
        claims = ("durable_append", "orphan_marking", "effect_ledger", "branches", "compaction")
        history = None

        def open(self, root, session, create):
            path = os.path.join(root, f"{session}.json")
            if not create and not os.path.exists(path):
                return []
            # The constructor creates the file (with `[]`) when it is
            # missing, but not its directory.
            os.makedirs(root, exist_ok=True)
            self.history = FileChatMessageHistory(path)
            try:
                messages = self.history.messages
            except ValueError as e:  # json.JSONDecodeError is a ValueError
                raise Damaged(f"{path}: the history does not parse: {e}") from None
            records = []
            for i, m in enumerate(messages):
                try:
                    records.append(json.loads(m.content))
                except (TypeError, ValueError) as e:
                    raise Damaged(f"{path}: message {i} is not a record: {e}") from None
            return records

        def write(self, records):
            for r in records:
                self.history.add_message(HumanMessage(content=json.dumps(r)))

        def close(self):
            self.history = None

    return serve(FileStore())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
