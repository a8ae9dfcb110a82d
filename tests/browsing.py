"""What the browser tests share: Debian's chromium and its flags, the check
that a page broke no Content-Security-Policy, screenshots, and the axe scan."""
import os

from tests.harness import ROOT

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = os.environ.get("AGENTSVC_SCREENSHOTS")  # a directory (e.g. docs) to save the pages' pictures to

# Playwright's own waits (navigation, clicks, wait_for_url) give up after 30 s and
# its expect() assertions after 5 s: beside the suite and a kill loop (load ~15 on
# two cores) a login's redirect took longer, and an expect() with no timeout of
# its own (some sixty in the tier) failed a run.  Every wait of the tier waits
# as long as the suite's other deadlines; what a test waits for is a condition.
PATIENT_MS = 90_000


def be_patient(context=None) -> None:
    """Give playwright's expect() (and ``context``'s waits, if given) PATIENT_MS."""
    from playwright.sync_api import expect

    expect.set_options(timeout=PATIENT_MS)
    if context is not None:
        context.set_default_timeout(PATIENT_MS)


def refused_by_policy(message) -> bool:
    """Whether chromium refused something the page did because of its
    Content-Security-Policy (api/routes/dashboard.py): it says so on the console."""
    return message.type == "error" and "Content Security Policy" in message.text


def screenshot(pg, name: str) -> None:
    if SHOTS:
        pg.screenshot(path=os.path.join(ROOT, SHOTS, name), full_page=False)


def scan(pg) -> list:
    """axe-core (vendored, served by the app) on the page as it is now: its
    violations of any impact (critical, serious, moderate, minor)."""
    pg.add_script_tag(url="/assets/vendor/axe.min.js")
    result = pg.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes'][:3]]}"
            for v in result["violations"]]
