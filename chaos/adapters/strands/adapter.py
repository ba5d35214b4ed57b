#!/usr/bin/env python3
"""agentchaos adapter for Strands Agents' `FileSessionManager` (protocol version 1).

Usage: python3 adapter.py

Speaks chaos/PROTOCOL.md on stdin/stdout through the Python adapter kit
(agentchaos_adapter, chaos/adapters/python); diagnostics go to stderr.

The mapping, through the store's session-repository API only
(`FileSessionManager`'s `create_agent`, `read_agent`, `create_message`,
`list_messages`): the root is the manager's `storage_dir`; the protocol
session is the Strands session of the same id, with one agent, `agent`;
each protocol record `{seq, ts, event}` is the message `message_<seq>`,
a user message whose one text block is the record's JSON. A write is one
`create_message` per record, each a file written to a temporary name and
renamed over its place, as Strands writes every file. Whether a session
exists is read from the layout the manager documents
(`session_<id>/session.json`), because constructing a manager creates its
session.

Claimed: `durable_append` (an acknowledged message is in its file when
`create_message` returns; whether it survives a power cut is the power
row's to judge) and what the kit's fold adds over the durable records.
Not claimed: `writer_lock` (none), `damage_refusal` (no checksums: a
changed byte inside a text block reads back as other text),
`torn_tail_repair` (no log), checkpoints and blobs.
"""

import json
import os
import sys

USAGE = "usage: adapter.py"
AGENT = "agent"


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if argv:
        print(f"strands adapter: unexpected argument {argv[0]!r}; {USAGE}", file=sys.stderr)
        return 2
    try:
        from importlib.metadata import version as package_version

        from strands.session.file_session_manager import FileSessionManager
        from strands.types.exceptions import SessionException
        from strands.types.session import SessionAgent, SessionMessage
        from agentchaos_adapter import Damaged, Store, serve
    except ImportError as e:
        print(
            f"strands adapter: cannot import its packages ({e}); install them: "
            "python3 -m pip install ./chaos/adapters/python -r chaos/adapters/strands/requirements.txt",
            file=sys.stderr,
        )
        return 3
    except RuntimeError as e:  # the kit's packaged schema is missing or unreadable
        print(f"strands adapter: {e}", file=sys.stderr)
        return 2

    class FileStore(Store):
        name = "strands-file-session-manager"
        version = f"strands-agents {package_version('strands-agents')}"
        claims = ("durable_append", "orphan_marking", "effect_ledger", "branches", "compaction")
        manager = None
        session = None

        def open(self, root, session, create):
            exists = os.path.exists(os.path.join(root, f"session_{session}", "session.json"))
            if not create and not exists:
                return []
            self.session = session
            try:
                self.manager = FileSessionManager(session, storage_dir=root)
                if self.manager.read_agent(session, AGENT) is None:
                    # A new session, or one whose creation a crash interrupted.
                    self.manager.create_agent(session, SessionAgent(agent_id=AGENT, state={}, conversation_manager_state={}))
                    return []
                messages = self.manager.list_messages(session, AGENT)
            except SessionException as e:
                raise Damaged(f"session {session!r} in {root}: {e}") from None
            records = []
            for m in messages:
                try:
                    (block,) = m.message["content"]
                    records.append(json.loads(block["text"]))
                except (KeyError, TypeError, ValueError) as e:
                    raise Damaged(f"message {m.message_id} of session {session!r} is not a record: {e}") from None
            return records

        def write(self, records):
            for r in records:
                message = {"role": "user", "content": [{"text": json.dumps(r)}]}
                self.manager.create_message(self.session, AGENT, SessionMessage(message=message, message_id=r["seq"]))

        def close(self):
            self.manager = self.session = None

    return serve(FileStore())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
