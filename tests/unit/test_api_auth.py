"""The optional API token: writes need it when configured, reads never do."""
import pytest

from app import create_app
from store import Store


@pytest.fixture
def client(tmp_path):
    return create_app(Store(str(tmp_path / "db")), api_token="s3cret-token").test_client()


def test_writes_need_the_token_and_reads_do_not(client):
    body = {"moniker": "countdown", "session_id": "s1"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"},
                    {"Authorization": "Bearer s3cret-token "}):
        r = client.post("/api/agents", json=body, headers=headers)
        assert r.status_code == 401 and r.json["error"]["code"] == "unauthorized", headers
        assert client.get("/api/sessions/s1").status_code == 404  # nothing was enqueued
    ok = client.post("/api/agents", json=body, headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 202
    assert client.get("/api/sessions/s1").json["status"] == "pending"
    assert client.post("/api/agents/x/pause", json={}).status_code == 401
    assert client.post("/api/conversations", json={"title": "t"}).status_code == 401
    assert client.get("/api/agents").status_code == 200 and client.get("/api/health").status_code == 200


def test_without_a_token_nothing_is_checked(tmp_path):
    open_client = create_app(Store(str(tmp_path / "db2"))).test_client()
    assert open_client.post("/api/agents", json={"moniker": "countdown"}).status_code == 202


def test_the_openapi_document_declares_the_token(client):
    spec = client.get("/api/openapi.json").json
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "401" in spec["paths"]["/api/agents"]["post"]["responses"]
