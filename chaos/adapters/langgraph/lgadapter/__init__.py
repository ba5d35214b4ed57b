"""The agentchaos adapter for LangGraph's SQLite checkpointer.

Modules: `schema` (what an event of protocol version 1 looks like),
`model` (the fold of a session's events: rules, projection, recovery
marks, context), `store` (how a session lives in a LangGraph thread:
checkpoints and pending writes through `SqliteSaver`), `serve` (the
JSON-lines protocol on top). See ../README.md for the mapping.
"""
