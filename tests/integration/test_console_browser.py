"""The console's approval flow in a real headless Chromium (Debian's, driven by Playwright), on real servers: the
API and a Celery worker as processes, a real PostgreSQL lock incident, a second Redis server as a write target.

An operator asks why queries hang and sees the Diagnosis, clicks "Fix it", sees the task wait for approval and the
request it waits on (which they may not decide: no approve scope); an approver, in their own console, reads what,
why and the preview naming the blocking pid, gives a reason and approves; the operator's page follows the task to
"Fixed and verified" and the blocking session is gone. Then a person's plan with a Redis write: the lead who asked
sees four-eyes keep their buttons off, the approver rejects it with a reason, and the write reads as skipped.

Assertions are on what a person sees (text on the page), with Playwright's auto-waiting `expect`: no sleeps.
Screenshots of each step go to the test's tmp dir, and to OPSGRAPH_SCREENSHOTS_DIR when it is set."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis

from tests.harness import RedisServer, Service
from tests.toolkit.pg_incident import LockIncident, lock_incident

if TYPE_CHECKING:  # playwright is imported where it is used: without PostgreSQL these tests are skipped
    from playwright.sync_api import Page

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.environ.get("OPSGRAPH_TEST_POSTGRES_URL"),
        reason="OPSGRAPH_TEST_POSTGRES_URL is not set (.ci/run sets it when PostgreSQL answers)",
    ),
]

TENANT = "shop"
LONG_MS = 150_000  # a diagnosis or a verified fix on a slow 2-core machine
STEP_MS = 30_000
QUESTION = "why are queries on the database hanging?"


@pytest.fixture(scope="module")
def incident() -> Iterator[LockIncident]:
    with lock_incident(os.environ["OPSGRAPH_TEST_POSTGRES_URL"], waiters=3) as live:
        yield live


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The Redis server a person's plan writes to (never opsgraph's own)."""
    server = RedisServer(tmp_path_factory.mktemp("target-redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def service(
    redis_server: RedisServer,
    target: RedisServer,
    incident: LockIncident,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    svc = Service(
        tmp_path_factory.mktemp("console"),
        redis_server.url,
        "",
        OPSGRAPH_POSTGRES_DSNS=f'["{incident.url}"]',
        OPSGRAPH_REDIS_WRITE_URLS=f'["{target.url}"]',
        OPSGRAPH_APPROVAL_FOUR_EYES="true",
    )
    svc.redis.flushdb()
    svc.start_api()
    svc.start_worker("cpu", "cpu-console")
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def keys(service: Service) -> dict[str, str]:
    """An operator (asks, cannot approve), an approver, and a lead who may do both (four-eyes stops them
    approving their own request)."""
    scopes = {"operator": ["operate"], "approver": ["approve"], "lead": ["operate", "approve"]}
    return {name: service.create_key(TENANT, s, name=name) for name, s in scopes.items()}


class Screens:
    """Numbered screenshots of each step: in the test's tmp dir, and in OPSGRAPH_SCREENSHOTS_DIR when set."""

    def __init__(self, tmp: Path) -> None:
        extra = os.environ.get("OPSGRAPH_SCREENSHOTS_DIR")
        self.dirs = [tmp, *([Path(extra)] if extra else [])]
        self.count = 0

    def shot(self, page: Page, name: str) -> None:
        self.count += 1
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(d / f"{self.count:02d}-{name}.png"))


@pytest.fixture(scope="module")
def screens(tmp_path_factory: pytest.TempPathFactory) -> Screens:
    return Screens(tmp_path_factory.mktemp("screens"))


@pytest.fixture(scope="module")
def console(service: Service, keys: dict[str, str]) -> Iterator[Callable[[str], Page]]:
    """One headless Chromium; `console(name)` is that person's console page, signed in with their key through
    the URL fragment as `opsgraph run` prints it (one page per person, kept for the module)."""
    from playwright.sync_api import sync_playwright

    binary = shutil.which("chromium")
    if binary is None:
        raise RuntimeError("chromium is not installed; `make test` installs it (scripts/ensure-chromium.sh)")
    pages: dict[str, Page] = {}
    with sync_playwright() as pw:
        # Chromium's sandbox cannot start as root; as any other user it stays on
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = pw.chromium.launch(executable_path=binary, headless=True, args=args)

        def open_console(name: str) -> Page:
            if name not in pages:
                page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
                page.goto(f"{service.base}/#token={keys[name]}")
                pages[name] = page
            return pages[name]

        yield open_console
        browser.close()


def test_fix_it_waits_for_an_approver_and_the_page_follows_it_to_fixed_and_verified(
    console: Callable[[str], Page], incident: LockIncident, screens: Screens
) -> None:
    from playwright.sync_api import expect

    pid = str(incident.holder_pid)
    operator = console("operator")
    operator.get_by_placeholder("What should opsgraph do?").fill(QUESTION)
    operator.get_by_role("button", name="Run", exact=True).click()

    asked = operator.locator("#log .msg").filter(has_text=QUESTION)
    expect(asked.locator(".answer")).to_contain_text("idle in transaction", timeout=LONG_MS)
    expect(asked.locator(".answer")).to_contain_text(pid)
    fix_button = asked.get_by_role("button", name="Fix it")
    expect(fix_button).to_be_enabled()
    screens.shot(operator, "operator-diagnosis-with-fix-it")

    fix_button.click()
    fix = operator.locator("#log .msg").filter(has_text="remediate:")
    expect(fix.locator(".wait")).to_contain_text("waiting for approval", timeout=LONG_MS)
    expect(fix.locator(".wait")).to_contain_text(pid)
    screens.shot(operator, "operator-fix-waiting-for-approval")

    # the link opens the request; this key may read it but not decide it, and the page says why
    fix.locator(".wait a").first.click()
    mine = operator.locator("#approvals .appr").filter(has_text="postgres_terminate_session")
    expect(mine).to_contain_text(pid, timeout=STEP_MS)
    expect(mine.get_by_role("button", name="Approve")).to_be_disabled()
    expect(mine.get_by_role("button", name="Reject")).to_be_disabled()
    expect(mine).to_contain_text("no approve scope")
    screens.shot(operator, "operator-request-not-theirs-to-decide")
    assert incident.session_alive(incident.holder_pid)  # nothing is written while the request waits

    approver = console("approver")
    expect(approver.locator("#appr-count")).to_have_text("1", timeout=STEP_MS)
    approver.get_by_role("button", name=re.compile("Pending approvals")).click()
    cards = approver.locator("#approvals .appr")
    expect(cards).to_have_count(1, timeout=STEP_MS)
    card = approver.locator(f"#appr-{cards.first.get_attribute('data-id')}")
    expect(card).to_contain_text(f"would terminate (and roll back the open transaction of) pid {pid}", timeout=STEP_MS)
    expect(card).to_contain_text("idle in transaction")  # why: the Diagnosis it came from
    expect(card).to_contain_text("asked by operator")
    expect(card).to_contain_text(re.compile(r"expires in \d+ min"))
    card.get_by_text("preview data").click()
    expect(card.locator("pre")).to_contain_text(f'"pid": {pid}')
    card.get_by_label("reason for the decision").fill("holder is a stuck admin session")
    screens.shot(approver, "approver-reads-the-request")
    card.get_by_role("button", name="Approve").click()
    expect(card.locator(".decision")).to_contain_text("approved by approver", timeout=STEP_MS)

    # PostgreSQL's activity view shows every database of the server: where another incident runs beside this one
    # (a shared test server), the Diagnosis proposes ending its blocker too, and the approver turns that down
    # (the approver's console follows the task it decided on; both of its panes are on one page for `or_`)
    followed = approver.locator("#log .msg").filter(has_text="remediate:").locator(".answer .outcome")
    undecided = approver.locator("#approvals .appr:not(.decided)")
    for _ in range(5):
        expect(followed.or_(undecided.first)).to_be_visible(timeout=LONG_MS)
        if followed.is_visible():
            break
        other = approver.locator(f"#appr-{undecided.first.get_attribute('data-id')}")
        expect(other.locator(".row").first).not_to_contain_text(f'"pid":{pid},')  # what: another session
        other.get_by_label("reason for the decision").fill("not this incident")
        other.get_by_role("button", name="Reject").click()
        expect(other.locator(".decision")).to_contain_text("rejected by approver", timeout=STEP_MS)

    # the operator's page kept following the task through the decision, the write and the checks run again
    expect(fix.locator(".answer .outcome")).to_have_text("Fixed", timeout=LONG_MS)
    expect(fix.locator(".answer")).to_contain_text("Fixed and verified")
    expect(fix.locator(".answer")).to_contain_text("holder is a stuck admin session")
    expect(fix.locator(".plan")).to_contain_text("succeeded")
    expect(fix.locator(".wait")).to_be_empty()
    screens.shot(operator, "operator-fixed-and-verified")
    expect(approver.locator("#log .msg").filter(has_text="remediate:").locator(".answer")).to_contain_text(
        "Fixed and verified", timeout=STEP_MS
    )
    screens.shot(approver, "approver-follows-the-task-it-approved")
    assert not incident.session_alive(incident.holder_pid)


def test_four_eyes_holds_the_requesters_buttons_and_a_rejection_reads_as_skipped(
    console: Callable[[str], Page], service: Service, target: RedisServer, keys: dict[str, str], screens: Screens
) -> None:
    from playwright.sync_api import expect

    client = redis.Redis.from_url(target.url)
    client.mset({f"session:{i}": "x" for i in range(5)})
    plan = {"nodes": [{"id": "wipe", "tool": "redis_delete_keys", "args": {"pattern": "session:*"}}]}
    resp = service.post(
        "/v1/tasks", json={"goal": "clear the stale sessions", "plan": plan}, headers=service.bearer(keys["lead"])
    )
    assert resp.status_code == 202, resp.text

    lead = console("lead")
    lead.get_by_role("button", name=re.compile("Pending approvals")).click()
    own = lead.locator("#approvals .appr").filter(has_text="redis_delete_keys")
    expect(own).to_contain_text("four-eyes", timeout=LONG_MS)
    expect(own.get_by_role("button", name="Approve")).to_be_disabled()
    screens.shot(lead, "lead-four-eyes-on-own-request")

    # the approver's view is still open from the first test: it refreshes itself and the request appears
    approver = console("approver")
    card = approver.locator("#approvals .appr").filter(has_text="redis_delete_keys")
    expect(card).to_contain_text("would delete 5 key(s) matching 'session:*'", timeout=LONG_MS)
    card.get_by_role("button", name="Reject").click()
    expect(card.locator(".err")).to_contain_text("say why you reject it")
    screens.shot(approver, "approver-reject-needs-a-reason")
    card.get_by_label("reason for the decision").fill("not during the sale")
    card.get_by_role("button", name="Reject").click()
    expect(card.locator(".decision")).to_contain_text("rejected by approver", timeout=STEP_MS)

    task = approver.locator("#log .msg").filter(has_text="clear the stale sessions")
    expect(task.locator(".answer h3")).to_contain_text("was not approved", timeout=LONG_MS)
    expect(task.locator(".answer")).to_contain_text("rejected by approver")
    expect(task.locator(".answer")).to_contain_text("not during the sale")
    expect(task.locator(".node").filter(has_text="wipe")).to_contain_text("skipped")
    screens.shot(approver, "approver-rejected-write-skipped")
    assert client.dbsize() == 5
