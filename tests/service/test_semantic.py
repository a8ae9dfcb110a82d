"""Semantic search with the fake embeddings endpoint (deterministic
bag-of-words vectors): a paraphrase ranks its source first in hybrid mode;
the endpoint failing never fails a step, search falls back to full text and
says so, and the embeddings catch up when the endpoint is back."""
import pytest

from tests.fake_openai import FakeOpenAI
from tests.harness import Service, wait_for


def warm_up(service: Service) -> None:
    """Wait until agents.py runs sessions: on a loaded machine it can take longer
    to start than an action's default wait."""
    made = service.create("countdown", "warm up", config={"interval_s": 0, "n": 1})
    service.wait_status(made["session_id"], "done", timeout=120)


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def svc(tmp_path_factory, fake):
    root = tmp_path_factory.mktemp("semantic")
    (root / "logs").mkdir()
    env = {"AGENTSVC_EMBED_BASE_URL": fake.base_url, "AGENTSVC_EMBED_MODEL": "fake-embed",
           "AGENTSVC_EMBED_DIM": str(fake.embedding_dim), "AGENTSVC_EMBED_BATCH": "16",
           "AGENTSVC_EMBED_MAX_BACKOFF_S": "1"}
    service = Service(str(root / "data"), str(root / "logs"), env=env).start()
    warm_up(service)
    yield service
    service.stop()


def search(svc, q, **params) -> dict:
    r = svc.get("/api/search", q=q, **params)
    assert r.status_code == 200, r.text
    return r.json()


def embedded_hit(svc, q, row_id, **params):
    """The hit for ``row_id`` once its vector took part in the ranking."""
    def ready():
        found = search(svc, q, **params)
        hit = next((h for h in found["hits"] if h["id"] == row_id), None)
        return found if found["mode"] == "hybrid" and hit and hit["ranks"]["vector"] else None
    return wait_for(ready, timeout=60, what=f"the vector of {row_id}")


def test_a_paraphrase_ranks_its_source_first(svc):
    cid = svc.post("/api/conversations", json={"title": "harbour"}).json()["conversation_id"]
    texts = ["The committee postponed the harbour bridge vote until the spring budget review",
             "Budget review of the canteen menu, budget budget budget",
             "The bridge club meets on Tuesdays",
             "Spring cleaning of the harbour office",
             "Vote for the best committee mascot"]
    ids = [svc.post(f"/api/conversations/{cid}/messages", json={"text": t}).json()["message"]["message_id"]
           for t in texts]
    for message_id in ids:
        embedded_hit(svc, "harbour bridge committee vote budget spring", message_id, conversation_id=cid)
    found = search(svc, "committee delayed voting on the harbour bridge", conversation_id=cid)
    assert found["mode"] == "hybrid" and "semantic" not in found
    first = found["hits"][0]
    assert first["id"] == ids[0] and first["ranks"]["vector"] == 1


def test_the_endpoint_failing_never_fails_a_step_and_embeddings_catch_up(svc, fake):
    fake.embeddings_status = 503
    try:
        before = len(fake.embedding_requests)
        made = svc.create("echo", "repeat", config={"interval_s": 0.05, "max_steps": 8})
        svc.control(made["agent_id"], "interrupt", guidance="the gondolier sang in the fog")
        svc.wait_status(made["session_id"], "done", timeout=60)
        steps = svc.steps(made["session_id"])
        assert len(steps) == 8 and all(s["status"] in ("ok", "done") for s in steps)
        wait_for(lambda: len(fake.embedding_requests) > before, what="the embedder to try the endpoint")
        found = search(svc, "gondolier")
        assert found["mode"] == "fts" and "failed" in found["semantic"]
        step = next(h for h in found["hits"] if h["kind"] == "step")
    finally:
        fake.embeddings_status = 200
    # Steps only: the finished session's summary holds the same word and may rank first.
    caught_up = embedded_hit(svc, "gondolier", step["id"], kind="step")
    assert caught_up["hits"][0]["id"] == step["id"]
