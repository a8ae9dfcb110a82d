"""The session engine: a session and its step (agent.py), the tool phase of a
step (tool_runner.py), child sessions, the session tree's budget, replay and
fork, the chain of interceptors around the step and the tool phase
(intercept.py), and the registry of the sessions this process runs
(live_sessions.py).
Imports runtime/base/ only.  The helpers below agent.py see a session through
the :class:`runtime.session.view.AgentView` protocol, never through the class
itself, so no import here comes back to agent.py."""
