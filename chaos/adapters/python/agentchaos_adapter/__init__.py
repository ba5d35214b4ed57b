"""agentchaos_adapter: write an agentchaos adapter (chaos/PROTOCOL.md,
protocol version 1) for a session store in Python.

Subclass `Store` (two methods: `open` and `write`), claim what it keeps,
and `sys.exit(serve(MyStore()))`. The kit speaks the protocol: framing,
validation against the packaged JSON Schema, error kinds, the session
rules, recovery, projection and context (`Model`). Check an adapter with
`python3 -m agentchaos_adapter.selftest -- CMD ARGS…`.

Importing the kit takes the process's stdout for the protocol (`wire`):
from then on what anything else prints goes to stderr.
"""

from . import wire

wire.take()

from .errors import (
    BadRequest,
    Damaged,
    Exists,
    Invalid,
    IoFailed,
    Locked,
    NotFound,
    RuleViolated,
    StoreError,
    Unsupported,
)
from .model import Call, Model
from .serve import PROTOCOL, serve
from .store import Record, Store

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL",
    "BadRequest",
    "Call",
    "Damaged",
    "Exists",
    "Invalid",
    "IoFailed",
    "Locked",
    "Model",
    "NotFound",
    "Record",
    "RuleViolated",
    "Store",
    "StoreError",
    "Unsupported",
    "serve",
]
