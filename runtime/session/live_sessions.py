"""The live sessions of this process.

``sessions`` maps session_id -> agent; ``agent_latest`` maps agent_id -> its
newest session_id, so that controls naming only an agent reach its latest
session.
"""
from runtime.session.agent import SessionAgent


class SessionRegistry:
    def __init__(self):
        self.sessions: dict[str, SessionAgent] = {}
        self.agent_latest: dict[str, str] = {}

    def add(self, agent: SessionAgent) -> None:
        self.sessions[agent.session_id] = agent
        current = self.sessions.get(self.agent_latest.get(agent.agent_id, ""))
        if current is None or agent.created_at >= current.created_at:
            self.agent_latest[agent.agent_id] = agent.session_id

    def remove(self, session_id: str) -> SessionAgent | None:
        """Forget a session this process no longer runs (another worker adopted it)."""
        agent = self.sessions.pop(session_id, None)
        if agent is not None and self.agent_latest.get(agent.agent_id) == session_id:
            del self.agent_latest[agent.agent_id]
        return agent

    def get(self, session_id: str) -> SessionAgent | None:
        return self.sessions.get(session_id)

    def resolve(self, agent_id: str, session_id: str | None) -> SessionAgent | None:
        return self.sessions.get(session_id or self.agent_latest.get(agent_id, ""))

    def running(self) -> list[SessionAgent]:
        return [a for a in self.sessions.values() if a.runner is not None and not a.runner.done()]

    def crashed(self) -> list[SessionAgent]:
        """The sessions whose runner crashed (runtime/worker/revival.py starts them again)."""
        return [a for a in list(self.sessions.values()) if a.crashed]

    def unfinished_ids(self) -> list[str]:
        """The sessions held here that have not finished (what the fence reasserts)."""
        return [a.session_id for a in list(self.sessions.values()) if not a.finished]

    def __len__(self) -> int:
        return len(self.sessions)

    def ids(self) -> frozenset[str]:
        """The ids of every session held here, finished ones too."""
        return frozenset(self.sessions)
