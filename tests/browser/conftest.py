"""The browser tier's fixtures: Debian's chromium, driven through playwright
against the real service (the ``browser`` marker comes from tests/conftest.py)."""
import os

import pytest

from tests.browsing import ARGS, CHROMIUM, be_patient, refused_by_policy


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium, one per test module."""
    playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: scripts/test.sh installs it (apt-get install chromium)")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        b.new_context = patient(b.new_context)
        yield b
        b.close()


def patient(new_context):
    """Every context of the tier waits as long as the suite's other deadlines (tests/browsing.py)."""
    def make(*args, **kwargs):
        context = new_context(*args, **kwargs)
        be_patient(context)
        return context
    return make


@pytest.fixture
def page(browser, shared_service):
    """A page on the dashboard of the module's service; fails the test if the
    page fetched from another host, threw, broke its Content-Security-Policy,
    got a 5xx or missed an asset."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    other_hosts = []
    pg.on("request", lambda r: r.url.startswith(shared_service.url) or other_hosts.append(r.url))
    errors = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda m: refused_by_policy(m) and errors.append(m.text))
    pg.on("response", lambda r: r.status >= 500 or (r.status == 404 and "/api/" not in r.url)
          and errors.append(f"{r.status} {r.url}"))
    pg.goto(shared_service.url + "/")
    yield pg
    context.close()
    assert not other_hosts, f"the dashboard fetched from other hosts: {other_hosts}"
    assert not errors, f"JavaScript errors or missing assets: {errors}"
