"""The agentchaos adapter for LangGraph's SQLite checkpointer.

Modules: `schema` (requests and events checked against the protocol's
committed JSON Schema, protocol/schema/protocol.schema.json),
`model` (the fold of a session's events: rules, projection, recovery
marks, context), `store` (how a session lives in a LangGraph thread:
checkpoints and pending writes through `SqliteSaver`), `serve` (the
JSON-lines protocol on top). See ../README.md for the mapping.
"""
