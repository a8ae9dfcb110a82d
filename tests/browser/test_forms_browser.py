"""The dashboard's forms in a real browser (chromium via playwright, as in
test_dashboard_browser.py): the search page's filters and pages kept in the
address, hits named by their agent; the create form back at the schemas' real
defaults after a submit, and a create from a profile; a baml agent on an
endpoint and model chosen from the operator's; a fork through its
dialog with edited state, and the original reached from the fork's page by the
agent's sessions list.  axe finds nothing serious on those pages."""
import os
import re
from datetime import datetime, timedelta, timezone

import pytest
from ulid import ULID

from tests.browsing import scan
from tests.conftest import COUNT_DIR_ENV
from tests.harness import Service

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")

PROFILE = "name: quick\ndescription: Counts down from 2.\nmoniker: countdown\nconfig: {n: 2}\ninterval_s: 0\n"


@pytest.fixture(scope="module")
def shared_service(tmp_path_factory):
    """The module's service, with a profiles directory holding one profile."""
    root = tmp_path_factory.mktemp("forms")
    for sub in ("logs", "counts", "profiles"):
        (root / sub).mkdir()
    (root / "profiles" / "quick.yaml").write_text(PROFILE)
    svc = Service(str(root / "data"), str(root / "logs"),
                  env={COUNT_DIR_ENV: str(root / "counts"), "AGENTSVC_PROFILES_DIR": str(root / "profiles")})
    svc.start()
    yield svc
    svc.stop()


def seed(svc, name: str, moniker: str, steps: int, word: str) -> dict:
    """A finished session with ``steps`` steps whose text holds ``word``,
    written straight to the store (agents.py leaves finished sessions alone)."""
    from store import Store
    st = Store(os.path.join(svc.data_dir, "lancedb"))
    try:
        agent_id, session_id = str(ULID()), str(ULID())
        start = datetime.now(timezone.utc) - timedelta(minutes=30)
        rows = [{"id": str(ULID()), "created_at": start + timedelta(milliseconds=10 * i), "agent_id": agent_id,
                 "session_id": session_id, "iteration": i, "step_token": str(i), "next_step_token": str(i + 1),
                 "status": "ok", "text": f"{word} number {i + 1}", "state": {"n": i}, "attempts": 1}
                for i in range(steps)]
        st.writer.submit_append("agent_steps", rows).result()
        snapshot = {"session_id": session_id, "agent_id": agent_id, "moniker": moniker, "name": name, "task": word,
                    "config": {}, "status": "done", "status_reason": "max_steps", "iteration": steps - 1,
                    "state": {"n": steps}, "created_at": start, "updated_at": start, "status_changed_at": start}
        st.writer.submit_upsert("agent_state", "session_id", [snapshot]).result()
        return snapshot
    finally:
        st.close()


def assert_accessible(pg):
    problems = scan(pg)
    assert not problems, problems


def test_search_filters_pages_and_names_survive_a_reload(page, shared_service):
    expect = playwright_api.expect
    svc = shared_service
    seed(svc, "alpha searcher", "countdown", 25, "quagga")
    seed(svc, "beta searcher", "echo", 4, "quagga")

    page.get_by_test_id("search-input").fill("quagga")
    page.get_by_test_id("search-input").press("Enter")
    hits = page.get_by_test_id("search-hit")
    expect(hits).to_have_count(20, timeout=30_000)  # 29 match: a page of 20
    expect(page.get_by_test_id("search-next")).to_be_enabled()

    page.get_by_test_id("search-kind-step").check()  # steps only (a finished session's summary names its task)
    expect(page.get_by_test_id("search-kind-step")).to_be_checked()
    page.get_by_test_id("search-filter-moniker").select_option("countdown")  # the filter: the address changes
    expect(page.get_by_test_id("search-range")).to_have_text("results 1–20", timeout=30_000)
    assert "moniker=countdown" in page.evaluate("location.hash") and "kind=step" in page.evaluate("location.hash")
    page.get_by_test_id("search-next").click()
    expect(page.get_by_test_id("search-range")).to_have_text("results 21–25", timeout=30_000)
    expect(hits).to_have_count(5)
    expect(page.get_by_test_id("search-next")).to_be_disabled()
    agents = page.get_by_test_id("search-hit-agent")
    assert set(agents.all_inner_texts()) == {"alpha searcher"}  # named, and only the filtered moniker's
    assert_accessible(page)

    page.reload()  # filters and page come back from the address
    expect(page.get_by_test_id("search-range")).to_have_text("results 21–25", timeout=30_000)
    expect(page.get_by_test_id("search-filter-moniker")).to_have_value("countdown")
    expect(page.get_by_test_id("search-kind-step")).to_be_checked()
    expect(page.get_by_test_id("search-kind-summary")).not_to_be_checked()
    expect(page.get_by_test_id("search-input")).to_have_value("quagga")
    page.go_back()  # the previous page of the same search
    expect(page.get_by_test_id("search-range")).to_have_text("results 1–20", timeout=30_000)
    expect(page.get_by_test_id("search-filter-moniker")).to_have_value("countdown")


def test_the_create_form_resets_to_the_real_defaults_and_starts_from_a_profile(page, shared_service):
    expect = playwright_api.expect
    svc = shared_service
    expect(page.locator("#create-moniker option")).not_to_have_count(0, timeout=30_000)
    expect(page.get_by_test_id("run-stop_on_done")).to_be_checked()  # the schema's default: true
    page.get_by_test_id("create-moniker").select_option("countdown")
    page.get_by_test_id("create-task").fill("count")
    page.get_by_test_id("cfg-n").fill("2")
    page.get_by_test_id("run-interval_s").fill("0")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("session-status")).to_be_visible(timeout=30_000)

    page.get_by_test_id("nav-agents").click()
    expect(page.get_by_test_id("create-moniker")).to_have_value("countdown")  # the moniker chosen stays
    expect(page.get_by_test_id("run-stop_on_done")).to_be_checked()
    expect(page.get_by_test_id("run-interval_s")).to_have_value("")
    expect(page.get_by_test_id("cfg-n")).to_have_value("")
    expect(page.get_by_test_id("create-task")).to_have_value("")
    assert_accessible(page)

    page.get_by_test_id("create-profile").select_option("quick")
    expect(page.get_by_test_id("create-moniker")).to_be_hidden()
    page.get_by_test_id("create-name").fill("from a profile")
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("session-status")).to_be_visible(timeout=30_000)
    session_id = page.evaluate("location.hash").split("/")[-1]
    done = svc.wait_status(session_id, "done", timeout=60)
    assert done["config"]["profile"]["name"] == "quick" and done["moniker"] == "countdown"
    assert done["name"] == "from a profile"


def test_the_create_form_offers_the_operators_endpoints_and_the_models_each_serves(page, shared_service):
    """A baml agent from the form names an endpoint and a model chosen from GET /api/endpoints, never a URL."""
    from tests.fake_openai import FakeOpenAI, Reply, scripted
    expect = playwright_api.expect
    svc = shared_service
    reply = '{"step": "0", "next_step": "1", "state": {}, "text": "hi", "data": null, "done": true}'
    from monikers.chat_template import CHATML_FALLBACK
    with FakeOpenAI(scripted(then=Reply(content=reply))) as server, FakeOpenAI() as untemplated:
        name = svc.endpoints.serve(server, name="form-llm", models=["m-small", "m-large"])
        # a llama.cpp server whose model has no chat template (as the base Gemma 3 270M): the form says so
        untemplated.props = {"chat_template": CHATML_FALLBACK, "eos_token": "<eos>"}
        svc.endpoints.serve(untemplated, name="no-template", models=["g"], structured="grammar")
        page.goto(svc.url + "/")  # the form reads the endpoints when its page is shown
        expect(page.locator("#create-moniker option")).not_to_have_count(0, timeout=30_000)
        page.get_by_test_id("create-moniker").select_option("countdown")
        expect(page.get_by_test_id("create-llm")).to_have_count(0)  # countdown takes no llm
        page.get_by_test_id("create-moniker").select_option("baml")
        expect(page.locator("#create-llm-endpoint option", has_text=name)).to_have_count(1)
        expect(page.get_by_test_id("create-llm-endpoint")).to_have_value("default")
        page.get_by_test_id("create-llm-endpoint").select_option("no-template")
        expect(page.get_by_test_id("create-llm-warning")).to_contain_text("falls back to ChatML")
        page.get_by_test_id("create-llm-endpoint").select_option(name)
        expect(page.get_by_test_id("create-llm-warning")).to_have_text("")
        expect(page.locator("#create-llm-models option")).to_have_count(2)
        expect(page.get_by_test_id("create-llm-model")).to_have_attribute("placeholder", "m-small")
        page.get_by_test_id("create-llm-model").fill("m-large")
        page.get_by_test_id("create-task").fill("say hi")
        page.get_by_test_id("run-interval_s").fill("0")
        page.get_by_test_id("create-submit").click()
        expect(page.get_by_test_id("session-status")).to_be_visible(timeout=30_000)
        session_id = page.evaluate("location.hash").split("/")[-1]
        done = svc.wait_status(session_id, "done", "error", timeout=60)
        assert done["status"] == "done", done["last_error"]
        assert {k: done["config"]["llm"][k] for k in ("endpoint", "model")} == {"endpoint": name, "model": "m-large"}
        assert server.requests and {r.model for r in server.requests} == {"m-large"}  # the step's, the summary's


def test_fork_through_the_dialog_with_edited_state_and_back_to_the_original(page, shared_service):
    expect = playwright_api.expect
    svc = shared_service
    made = svc.create("echo", "repeat", name="forked echo", config={"interval_s": 0, "max_steps": 4})
    svc.wait_status(made["session_id"], "done", timeout=60)
    page.goto(f"{svc.url}/#/session/{made['session_id']}")
    page.locator('[data-testid=steps] li[data-iteration="1"]').get_by_test_id("fork-here").click()
    dialog = page.get_by_test_id("fork-dialog")
    expect(dialog).to_be_visible()
    state = page.get_by_test_id("fork-state")
    expect(state).to_have_value(re.compile(r'"n": 2'), timeout=30_000)  # prefilled from the step's state
    assert_accessible(page)

    state.fill('{"n": 100, "heard": [')  # not JSON: refused here, the dialog stays
    page.get_by_test_id("fork-submit").click()
    expect(page.get_by_test_id("fork-error")).to_contain_text("not valid JSON")
    state.fill('{"n": 100, "heard": ["edited"]}')
    page.get_by_test_id("fork-config").fill('{"max_steps": "many"}')  # the API refuses it: shown in the dialog
    page.get_by_test_id("fork-submit").click()
    expect(page.get_by_test_id("fork-error")).to_contain_text("max_steps", timeout=30_000)
    expect(dialog).to_be_visible()
    page.get_by_test_id("fork-config").fill('{"max_steps": 3}')
    page.get_by_test_id("fork-submit").click()

    expect(page.locator(".forked-from")).to_contain_text("at step 2", timeout=30_000)
    fork_id = page.evaluate("location.hash").split("/")[-1]
    assert fork_id != made["session_id"]
    expect(page.locator("#s-title")).to_contain_text("forked echo")  # the same agent, under its name
    svc.wait_status(fork_id, "done", timeout=60)
    assert svc.steps(fork_id)[0]["state"] == {"n": 101, "heard": ["edited"]}  # the edited state reached the fork
    first = page.locator('[data-testid=steps] li[data-iteration="2"]')
    expect(first).to_contain_text("101", timeout=30_000)

    sessions = page.get_by_test_id("agent-session")
    expect(sessions).to_have_count(2, timeout=30_000)  # the fork and its original, both listed
    page.locator(f'[data-testid=agent-session][data-session-id="{made["session_id"]}"] a').click()
    expect(page.get_by_test_id("session-status")).to_have_text("done", timeout=30_000)
    assert page.evaluate("location.hash") == f"#/session/{made['session_id']}"
    expect(page.locator(f'[data-testid=agent-session][data-session-id="{fork_id}"] a')).to_be_visible()
