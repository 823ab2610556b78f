"""What operators paste from a terminal besides kubectl and psql: a `systemctl status` (a command and its report
header above a few journal lines) and a JVM thread dump that reports a deadlock."""

from __future__ import annotations

import shutil
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

DATA = Path(__file__).resolve().parent.parent / "data" / "pasted"


def bundle_of(tmp_path: Path, name: str) -> Path:
    shutil.copy(DATA / name, tmp_path / "paste.txt")
    return tmp_path


def test_systemctl_status_is_a_log_under_its_header(tmp_path: Path) -> None:
    ev = load_bundle(bundle_of(tmp_path, "systemctl-status.txt"))
    assert not ev.ignored
    (log,) = ev.kind("log")
    assert sum(r["ts"] is not None for r in log.data["records"]) == 3
    diagnosis = investigate(ev, "why did the report worker stop?")
    assert diagnosis.category == Category.RESOURCE_EXHAUSTION
    assert "report-worker" in diagnosis.root_cause and "oom" in diagnosis.root_cause.lower()


def test_a_thread_dump_deadlock_is_a_code_defect(tmp_path: Path) -> None:
    diagnosis = investigate(load_bundle(bundle_of(tmp_path, "jstack.txt")), "ledger stopped processing transfers")
    assert diagnosis.category == Category.CODE_DEFECT
    assert "deadlock" in diagnosis.root_cause and "lock-ordering" in diagnosis.root_cause


def test_prose_with_two_dates_stays_prose(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(
        "Post-incident notes\n\nWe met on 2026-11-17 10:00 and again on 2026-11-18 09:00.\n"
        "Nobody saw errors.\nThe dashboards were fine.\nAction items follow.\nOwner: platform.\n"
        "Review date: next week.\nStatus: open.\nLinks: none.\n"
    )
    assert not load_bundle(tmp_path).kind("log")


def test_a_pool_whose_threads_all_wait_on_their_own_queue_is_starved(tmp_path: Path) -> None:
    """jcmd Thread.print of a pod: every invoice-render thread parked in CompletableFuture.join inside a pool task
    (the idle Tomcat threads waiting for work are not)."""
    ev = load_bundle(bundle_of(tmp_path, "jcmd-starved-pool.txt"))
    (log,) = ev.kind("log")
    assert log.object == "Pod/billing/invoice-api-5d8f7c9b6-k2x9p"
    assert log.data["records"][0]["ts"] is not None
    diagnosis = investigate(ev, "invoice-api stopped answering")
    assert diagnosis.category == Category.CODE_DEFECT
    assert "invoice-render" in diagnosis.root_cause and "starvation" in diagnosis.root_cause
    assert "http-nio" not in diagnosis.root_cause
