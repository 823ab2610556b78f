"""Change records pasted from a change tool are read as the log of the change: a completed planned change explains
the alerts it caused as planned work; a failed one is not planned work."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.investigate import investigate
from diagnosis.model import Category

TICKET = """Change CHG0041877                                         State: {state}
Short description: reviews DB - add composite index on reviews.reviews (product_id, created_at)
Type: Normal     Risk: Moderate     Assignment group: DBA-Platform
Planned start: 2025-11-19 01:00 CET     Planned end: 2025-11-19 03:30 CET
Actual start:  2025-11-19 01:03 CET     Actual end:  2025-11-19 03:02 CET

Work notes:
 2025-11-19 01:03 CET  M. Vogel  Started pt-osc on db-reviews-01.
 2025-11-19 03:02 CET  M. Vogel  Replica caught up (Seconds_Behind_Source 0). Closing.
"""

MARKDOWN = """# CHG-4471 - Replay shipment.status.v1 for shipment-events-v2

| Field            | Value                   |
|------------------|-------------------------|
| State            | Implement               |
| Planned start    | 2025-04-16 09:00 UTC    |
| Planned end      | 2025-04-16 11:00 UTC    |
"""


def _alert(tmp_path: Path) -> None:
    alert = {
        "version": "4",
        "status": "resolved",
        "receiver": "oncall",
        "groupKey": '{}:{alertname="MySQLReplicaLagHigh"}',
        "alerts": [
            {
                "status": "resolved",
                "labels": {"alertname": "MySQLReplicaLagHigh", "instance": "db-reviews-02:9104"},
                "annotations": {"summary": "replica lag above 60s"},
                "startsAt": "2025-11-19T01:44:00Z",
                "endsAt": "2025-11-19T01:51:25Z",
                "fingerprint": "a1",
            }
        ],
    }
    (tmp_path / "alert.json").write_text(json.dumps(alert))


def test_a_ticket_is_the_log_of_its_change(tmp_path: Path) -> None:
    (tmp_path / "ticket.txt").write_text(TICKET.format(state="Closed - Successful"))
    (log,) = load_bundle(tmp_path).kind("log")
    assert log.object == "change CHG0041877"
    msgs = [r["msg"] for r in log.data["records"]]
    assert msgs[0].startswith("planned maintenance CHG0041877 started: reviews DB")
    assert any("pt-osc" in m for m in msgs) and msgs[-1].startswith("change CHG0041877 ended")


def test_a_markdown_change_template_is_read(tmp_path: Path) -> None:
    (tmp_path / "CHG.md").write_text(MARKDOWN)
    (log,) = load_bundle(tmp_path).kind("log")
    assert log.object == "change CHG-4471" and log.data["records"][0]["ts"] == 1744794000.0


def test_a_completed_change_makes_its_resolved_alert_planned_work(tmp_path: Path) -> None:
    (tmp_path / "ticket.txt").write_text(TICKET.format(state="Closed - Successful"))
    _alert(tmp_path)
    d = investigate(load_bundle(tmp_path), "was the reviews replica ok overnight?")
    assert d.category is Category.HEALTHY and "planned" in d.root_cause, d.root_cause


def test_a_failed_change_is_not_planned_work(tmp_path: Path) -> None:
    (tmp_path / "ticket.txt").write_text(TICKET.format(state="Closed - Unsuccessful, backed out"))
    (log,) = load_bundle(tmp_path).kind("log")
    assert log.data["records"][-1]["level"] == "error"
