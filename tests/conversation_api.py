"""Conversations and turns through the service's HTTP API, for tests."""
from tests.harness import wait_for


def new_conversation(svc, **body) -> str:
    r = svc.post("/api/conversations", json={"title": "test", **body})
    assert r.status_code == 201, r.text
    return r.json()["conversation_id"]


def post(svc, cid: str, text: str, **body) -> dict:
    r = svc.post(f"/api/conversations/{cid}/messages", json={"text": text, **body})
    assert r.status_code == 201, r.text
    return r.json()


def turns_of(svc, sid: str, **params) -> dict:
    r = svc.get(f"/api/sessions/{sid}/turns", **params)
    assert r.status_code == 200, r.text
    return r.json()


def ended_turns(svc, sid: str, n: int, timeout: float = 30.0) -> list[dict]:
    def ready():
        turns = turns_of(svc, sid)["turns"]
        return turns if len(turns) >= n and all(t["status"] == "ended" for t in turns[:n]) else None
    return wait_for(ready, timeout=timeout, what=f"{n} ended turns of {sid}")
