"""The base of the runtime, below every room: storage as awaitables
(persistence.py) and the fence that guards a session's writes (fence.py), the
agent's control flags (agent_core.py), observers (fanout.py), the step's call
with its timeout (stepcall.py), and process plumbing (aio.py, identity.py,
relay.py, rate_limits.py).  Nothing here imports another room."""
