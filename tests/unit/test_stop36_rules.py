"""Stop 36: SSSD's debug logs read with their levels, `chronyc sources` read as the time sources a host has, and a
recipient an SMS or mail provider refuses as written. Each rule's test asserts the negative case beside it."""

from __future__ import annotations

from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.logs import LineParser
from diagnosis.investigate import investigate
from diagnosis.model import Category


def test_sssd_lines_carry_their_time_and_the_level_of_their_debug_mask() -> None:
    p = LineParser()
    ts, level, msg = p.parse("(2024-02-19  7:58:14): [be[corp.example.com]] [sasl_bind_send] (0x0020): bind failed")
    assert ts == 1708329494.0 and level == "error" and msg.startswith("[be[corp.example.com]]")
    _, level, _ = p.parse("(2025-11-04  5:40:55.206874): [be[ad.example.edu]] [fo_set_port_status] (0x0100): ok")
    assert level == "info"
    ts, level, _ = p.parse("(Mon Feb 19 07:58:14 2024) [sssd[be[corp]]] [be_mark_offline] (0x0080): Going offline")
    assert ts == 1708329494.0 and level == "warn"
    # a parenthesised remark is no SSSD line
    assert p.parse("(see the runbook) 0x0020 was set")[0] is None


_KRB5 = "\n".join(
    f"(2024-02-19  8:{31 + i}:55): [krb5_child[47002]] [get_and_save_tgt] (0x0020): [RID#17{i}] 1720: "
    "[-1765328347][Clock skew too great]"
    for i in range(6)
)


def _chrony(line: str, host: str = "fs-smb-02") -> str:
    return (
        f"[root@{host} ~]# chronyc sources\n"
        "MS Name/IP address         Stratum Poll Reach LastRx Last sample\n"
        "===============================================================================\n"
        f"{line}\n"
        f"[root@{host} ~]# chronyd -Q 'server dc01.corp.example.com iburst'\n"
        "2024-02-19T07:48:02Z System clock wrong by 311.482153 seconds (ignored)\n"
        f"[root@{host} ~]# journalctl -u chronyd\n"
        f"Sep 25 16:40:19 {host} chronyd[1107]: Selected source 10.30.0.11 (dc01.corp.example.com)\n"
    )


def test_a_host_whose_only_time_source_never_answered_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "krb5_child.log").write_text(_KRB5 + "\n")
    (tmp_path / "shell.txt").write_text(
        _chrony("^? ntp-legacy01.dmz.corp.ex>     0  10     0     -     +0ns[ +0ns] +/- 0ns")
    )
    (item,) = load_bundle(tmp_path).kind("host/time_sources")
    assert item.data["sources"][0]["never_received"] and item.data["host"] == "fs-smb-02"
    d = investigate(load_bundle(tmp_path), "why can nobody log in to fs-smb-02?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "ntp-legacy01" in d.root_cause and "off by +311 s" in d.root_cause


def test_a_dead_reference_clock_or_a_selected_source_is_not_called_configuration(tmp_path: Path) -> None:
    (tmp_path / "krb5_child.log").write_text(_KRB5 + "\n")
    # a GPS reference clock wired to the host that stopped: hardware
    (tmp_path / "shell.txt").write_text(
        _chrony("#? GPS                           0   4     0     -     +0ns[ +0ns] +/- 0ns")
    )
    d = investigate(load_bundle(tmp_path), "why can nobody log in to fs-smb-02?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    # a source selected and answering: the host follows it (the old reading)
    (tmp_path / "shell.txt").write_text(
        _chrony("^* dc01.corp.example.com        2   6   377    21   -18us[-19us] +/- 613us")
    )
    d = investigate(load_bundle(tmp_path), "why can nobody log in to fs-smb-02?")
    assert d.category == Category.INFRASTRUCTURE and "no time source" not in d.root_cause, d.root_cause


def _reminders(to_national: bool) -> str:
    lines = []
    for i in range(60):
        site, ok = ("RVS", False) if i % 3 == 0 else ("HGH", True)
        t = f"2025-04-14T06:00:{i % 60:02d}.100Z"
        if ok or not to_national:
            lines.append(f"ts={t} level=info event=sms.submitted appointment_id=A-{i} site={site} to=447700****{i:02d}")
        else:
            lines.append(
                f'ts={t} level=warning event=sms.rejected appointment_id=A-{i} site={site} to="07700 9301{i:02d}" '
                'vonage_status=3 error_text="Invalid to address" http_status=200'
            )
    return "\n".join(lines) + "\n"


def test_recipients_the_provider_refuses_as_written_are_bad_data(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text(_reminders(True))
    d = investigate(load_bundle(tmp_path), "did tomorrow's reminders go out?")
    assert d.category == Category.DATA_QUALITY and "Invalid to address" in d.root_cause, d.root_cause
    (tmp_path / "run.log").write_text(_reminders(False))
    d = investigate(load_bundle(tmp_path), "did tomorrow's reminders go out?")
    assert d.category == Category.HEALTHY, d.root_cause
