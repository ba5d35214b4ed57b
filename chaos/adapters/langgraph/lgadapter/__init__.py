"""The agentchaos adapter for LangGraph's SQLite checkpointer, on the
Python adapter kit (agentchaos_adapter, chaos/adapters/python), which
speaks the protocol and keeps the fold of the events.

`store` is how a session lives in a LangGraph thread: checkpoints and
pending writes through `SqliteSaver`, and the session rules LangGraph has
no basis for. See ../README.md for the mapping.
"""
