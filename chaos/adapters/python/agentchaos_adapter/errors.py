"""The protocol's error kinds (chaos/PROTOCOL.md, section 1) as exceptions.

A store raises one of these to answer a request with an `error` reply;
the kit turns it into `{"kind": ..., "message": ...}`. Messages are one
line (the kit joins lines if they are not). Anything else a store raises is
a bug: the adapter prints one line on stderr and exits 2.
"""

from __future__ import annotations


class StoreError(Exception):
    """A refusal or failure with its protocol error kind."""

    kind = "io"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = " ".join(str(message).split())


class RuleViolated(StoreError):
    """A session rule refused the event; nothing was written."""

    kind = "rule"

    def __init__(self, message: str) -> None:
        super().__init__(f"rule violated: {message}")


class IoFailed(StoreError):
    """An I/O call failed; the event is not acknowledged."""

    kind = "io"


class Damaged(StoreError):
    """Stored data is damaged; the store refuses to load it."""

    kind = "damage"


class Locked(StoreError):
    """Another writer holds the session."""

    kind = "locked"


class NotFound(StoreError):
    """`open` without `create` of a session that does not exist, or no such blob."""

    kind = "not_found"


class Exists(StoreError):
    """`open` with `create` of a session that exists."""

    kind = "exists"


class Invalid(StoreError):
    """A well-formed request with unusable content."""

    kind = "invalid"


class BadRequest(StoreError):
    """The request does not fit the protocol."""

    kind = "bad_request"


class Unsupported(StoreError):
    """The store does not implement the operation."""

    kind = "unsupported"


# Refusals that leave nothing behind: after any other error from a write
# the session may or may not hold the event, and the kit stops using it.
NOTHING_WRITTEN = frozenset(("rule", "invalid", "bad_request", "unsupported", "exists", "not_found"))
