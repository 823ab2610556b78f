"""Stop 36: SSSD's debug logs read with their levels, `chronyc sources` read as the time sources a host has, and a
recipient an SMS or mail provider refuses as written. Each rule's test asserts the negative case beside it."""

from __future__ import annotations

from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.logs import LineParser
from diagnosis.investigate import investigate
from diagnosis.model import Category
from tests.toolkit.exports import prom_matrix


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


def _syslog(lines: list[str], host: str = "nas-dr-01") -> str:
    return "\n".join(f"May 12 02:06:{31 + i:02d} {host} kernel: {line}" for i, line in enumerate(lines)) + "\n"


def test_a_storage_controller_fault_is_named_with_the_pool_it_suspended(tmp_path: Path) -> None:
    (tmp_path / "kern.log").write_text(
        _syslog(
            [
                "mpt3sas_cm0: fault_state(0x2622)!",
                "mpt3sas_cm0: diag reset: FAILED",
                "sd 0:0:0:0: [sda] tag#812 FAILED Result: hostbyte=DID_NO_CONNECT driverbyte=DRIVER_OK",
                "WARNING: Pool 'backup' has encountered an uncorrectable I/O failure and has been suspended.",
            ]
        )
    )
    d = investigate(load_bundle(tmp_path), "why does replication to the DR NAS fail?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "storage controller" in d.root_cause and "mpt3sas" in d.root_cause and "'backup'" in d.root_cause
    # the controller's driver saying it is fine is no fault
    (tmp_path / "kern.log").write_text(_syslog(["mpt3sas_cm0: LSISAS3008: FWVersion(16.00.10.00)"] * 3))
    d = investigate(load_bundle(tmp_path), "why does replication to the DR NAS fail?")
    assert not any(f.code == "host_hardware_error" for f in d.findings), d.root_cause


def _app_log(errors: list[str], level: str = "ERROR") -> str:
    lines = [f"2026-11-30 22:{i:02d}:00.000 INFO  writer - batch {i} inserted" for i in range(20)]
    lines += [f"2026-11-30 22:{30 + i:02d}:00.000 {level} writer - insert failed: {e}" for i, e in enumerate(errors)]
    return "\n".join(lines) + "\n"


def test_a_full_tablespace_and_a_full_lmdb_map_are_storage_run_out(tmp_path: Path) -> None:
    ora = "ORA-01688: unable to extend table RATING.RATED_EVENT partition P202611 by 8192 in tablespace RATED_2026"
    (tmp_path / "writer.log").write_text(_app_log([ora] * 6))
    d = investigate(load_bundle(tmp_path), "why is rating stalled?")
    assert d.category == Category.RESOURCE_EXHAUSTION and "Oracle tablespace RATED_2026" in d.root_cause, d.root_cause
    (tmp_path / "writer.log").unlink()
    (tmp_path / "slapd.log").write_text(
        "\n".join(
            f"Feb 19 09:{38 + i}:46 ldap-prov-01 slapd[1184]: mdb_id2entry_put: mdb_put failed: MDB_MAP_FULL: "
            f'Environment mapsize limit reached(-30792) "uid=u{i},ou=people,dc=example,dc=net"'
            for i in range(6)
        )
        + "\n"
    )
    d = investigate(load_bundle(tmp_path), "why can new users not be created?")
    assert d.category == Category.RESOURCE_EXHAUSTION and "LMDB database of slapd on ldap-prov-01" in d.root_cause


def test_a_search_cluster_at_its_shard_limit_is_resource_exhaustion(tmp_path: Path) -> None:
    refusal = (
        "[2024-04-02T00:00:{:02d},412][WARN ][logstash.outputs.elasticsearch][main] Could not index event to "
        'Elasticsearch. {{:status=>400, :response=>{{"index"=>{{"status"=>400, "error"=>{{"type"=>'
        '"validation_exception", "reason"=>"Validation Failed: 1: this action would add [2] total shards, but this '
        'cluster currently has [2999]/[3000] maximum shards open;"}}}}}}}}'
    )
    (tmp_path / "logstash-plain.log").write_text("\n".join(refusal.format(i) for i in range(8)) + "\n")
    d = investigate(load_bundle(tmp_path), "why are today's logs missing in Kibana?")
    assert d.category == Category.RESOURCE_EXHAUSTION and "shard limit" in d.root_cause, d.root_cause


_ARGO_APP = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "Application",
    "metadata": {"name": "billing-api-prod", "namespace": "argocd"},
    "status": {
        "history": [
            {"id": 311, "revision": "5ab2e07c91d3", "deployedAt": "2024-09-12T13:02:49Z"},
            {"id": 312, "revision": "e4c19a7d02b3", "deployedAt": "2024-09-17T09:38:09Z"},
        ],
        "summary": {"images": ["ghcr.io/acme/billing-api:v2.31.0", "ghcr.io/acme/billing-worker:v2.30.4"]},
    },
}


def test_an_argo_application_s_history_is_its_deploys_and_a_go_panic_takes_the_time_above_it(tmp_path: Path) -> None:
    import json

    (tmp_path / "app.json").write_text(json.dumps(_ARGO_APP))
    log = [
        json.dumps({"level": "info", "ts": f"2024-09-17T09:59:{i:02d}.000Z", "msg": "request", "status": 200})
        for i in range(30)
    ]
    log += ["panic: assignment to entry in nil map", "", "goroutine 41 [running]:", "main.refresh(0xc0001b4000)"]
    (tmp_path / "kubectl-logs-previous-billing-api-6d9c7b8f5-k2x8q.txt").write_text("\n".join(log) + "\n")
    ev = load_bundle(tmp_path)
    syncs = [i for i in ev.kind("log") if i.object == "argocd/billing-api-prod"]
    assert len(syncs) == 1 and "v2.31.0" in syncs[0].data["records"][-1]["msg"]
    d = investigate(ev, "why is billing-api crash looping?")
    assert d.category == Category.CODE_DEFECT, d.root_cause
    assert "panic (assignment to entry in nil map)" in d.root_cause and "v2.31.0" in d.root_cause, d.root_cause


_MOVE_COMMIT = """commit 5b7e2f90c1d84a6b3e09f27d15c8a4e6b2f01d93
Author: Ops <ops@example.com>
Date:   Mon Sep 2 15:41:08 2024 +0200

    restic role: move repository var into group_vars

diff --git a/group_vars/web.yml b/group_vars/web.yml
--- a/group_vars/web.yml
+++ b/group_vars/web.yml
@@ -14,6 +14,7 @@
 restic_backup_paths:
+restic_repository: "s3:s3.example.com/backups/{{ inventory_hostname }}"
diff --git a/host_vars/web-01.yml b/host_vars/web-01.yml
--- a/host_vars/web-01.yml
+++ b/host_vars/web-01.yml
@@ -1,3 +1,2 @@
 ---
-restic_repository: "s3:s3.example.com/backups/hosts/web-01"
"""


def test_a_repository_setting_moved_to_where_nothing_is_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "commit.txt").write_text(_MOVE_COMMIT)
    gone = "Fatal: unable to open config file: Stat: The specified key does not exist."
    # (journalctl -o short-iso)
    journal = [f"2024-09-0{3 + i}T02:15:03+0000 web-01 restic[88273{i}]: {gone}" for i in range(2)]
    (tmp_path / "journal-restic.txt").write_text("\n".join(journal) + "\n")
    d = investigate(load_bundle(tmp_path), "why do the backups fail?")
    assert d.category == Category.CONFIGURATION_ERROR and "restic_repository" in d.root_cause, d.root_cause
    assert "hosts/web-01" in d.root_cause
    # the same errors before the commit: it did not cause them
    (tmp_path / "journal-restic.txt").write_text("\n".join(j.replace("-09-0", "-08-2") for j in journal) + "\n")
    d = investigate(load_bundle(tmp_path), "why do the backups fail?")
    assert not any(f.code == "location_changed" for f in d.findings), d.root_cause


def test_a_validator_s_rejects_are_live_while_the_alert_named_for_them_fires(tmp_path: Path) -> None:
    import json

    lines = [f"2026-12-03 05:{i:02d}:00,000 INFO  [icx] m.c.SftpPoller - No new files" for i in range(50)]
    lines += [
        f"2026-12-03 06:03:{i:02d},000 WARN  [icx] m.c.RecordValidator - REJECT file=ICX_20261203_01.csv line={i} "
        f"reason=DURATION_OUT_OF_RANGE call_duration={140000 + i} max=86400"
        for i in range(30)
    ]
    lines += [
        f"2026-12-03 {6 + i // 60:02d}:{i % 60:02d}:30,000 INFO  [icx] m.c.SftpPoller - No new files"
        for i in range(10, 120)
    ]
    (tmp_path / "collector.log").write_text("\n".join(lines) + "\n")
    alert = {
        "version": "4",
        "status": "firing",
        "receiver": "ops",
        "groupKey": '{}:{alertname="MediationRejectRatioHigh"}',
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "MediationRejectRatioHigh", "instance": "med-01:9410"},
                "annotations": {},
                "startsAt": "2026-12-03T06:05:44Z",
                "endsAt": "0001-01-01T00:00:00Z",
            }
        ],
    }
    (tmp_path / "alert.json").write_text(json.dumps(alert))
    d = investigate(load_bundle(tmp_path), "why is the reject ratio high?")
    assert d.category == Category.DATA_QUALITY and "DURATION_OUT_OF_RANGE" in d.root_cause, d.root_cause
    (tmp_path / "alert.json").unlink()  # no alert: the rejects stopped an hour ago and the log went on
    d = investigate(load_bundle(tmp_path), "why is the reject ratio high?")
    assert d.category != Category.DATA_QUALITY, d.root_cause


def test_a_reject_series_whose_reason_names_bad_values_is_bad_data(tmp_path: Path) -> None:
    import json

    series = [
        ({"job": "position-ingest", "reason": "coordinate_out_of_range"}, [0.0] * 20 + [0.5] * 40),
        ({"job": "position-ingest", "reason": "invalid_vin"}, [0.015] * 60),  # a bad reason, but there all along
    ]
    body = prom_matrix("position_ingest_rejects", series, start=1736760600, step=900)
    (tmp_path / "rejects.json").write_text(json.dumps(body))
    d = investigate(load_bundle(tmp_path), "why did the vans freeze on the map?")
    assert d.category == Category.DATA_QUALITY and "coordinate_out_of_range" in d.root_cause, d.root_cause
    assert not any("invalid_vin" in f.object for f in d.findings if f.code == "bad_data")


def _pod(restarts: int, started: str, finished: str, ready: bool = True) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "kong-cp-6b8d5f7c9d-h2lz8",
            "namespace": "kong",
            "creationTimestamp": "2025-02-08T02:03:52Z",
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "proxy", "image": "kong:3.7.1"}]},
        "status": {
            "phase": "Running",
            "startTime": "2025-02-08T02:03:52Z",
            "containerStatuses": [
                {
                    "name": "proxy",
                    "ready": ready,
                    "restartCount": restarts,
                    "state": {"running": {"startedAt": started}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": finished}},
                }
            ],
        },
    }


def test_a_container_that_failed_once_at_start_and_runs_ready_since_has_recovered(tmp_path: Path) -> None:
    import json

    metric = prom_matrix("kong_nginx_connections_active", [({"job": "kong"}, [1.0] * 60)], start=1738980000)
    (tmp_path / "m.json").write_text(json.dumps(metric))  # the evidence runs to 03:00
    pods = {"apiVersion": "v1", "kind": "List", "items": [_pod(1, "2025-02-08T02:04:10Z", "2025-02-08T02:04:09Z")]}
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    d = investigate(load_bundle(tmp_path), "is the gateway ok after the upgrade?")
    assert any(f.code == "restarted_once" for f in d.findings) and d.category == Category.HEALTHY, d.root_cause
    # restarted again and again, or not ready: no recovery
    pods["items"] = [_pod(4, "2025-02-08T02:40:10Z", "2025-02-08T02:40:09Z")]
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    d = investigate(load_bundle(tmp_path), "is the gateway ok after the upgrade?")
    assert not any(f.code == "restarted_once" for f in d.findings)


def _kong(i: int, status: int, source: str) -> str:
    import json

    return json.dumps(
        {
            "request": {"method": "POST", "uri": "/partner/v1/labels", "headers": {"apikey": "REDACTED"}},
            "response": {"status": status, "headers": {}},
            "route": {"name": "partner-labels"},
            "service": {"name": "partner-api", "host": "partner-api.internal", "port": 8080},
            "consumer": {"username": "freightly"},
            "latencies": {"request": 2, "kong": 1, "proxy": -1 if source == "kong" else 70},
            "started_at": 1752052300094 + 1000 * i,
            "source": source,
        }
    )


def test_kong_log_plugin_records_are_an_access_log(tmp_path: Path) -> None:
    lines = [_kong(i, 200, "upstream") for i in range(10)] + [_kong(10 + i, 401, "kong") for i in range(5)]
    (tmp_path / "file-log-partner.json.log").write_text("\n".join(lines) + "\n")
    ev = load_bundle(tmp_path)
    assert not ev.ignored
    (log,) = ev.kind("log")
    refused = [r for r in log.data["records"] if r["level"] == "warn"]
    assert len(refused) == 5 and refused[0]["ts"] == 1752052310.094
    assert (
        "401" in refused[0]["msg"] and "source=kong" in refused[0]["msg"] and "consumer=freightly" in refused[0]["msg"]
    )


def test_an_mqtt_broker_refusing_a_client_s_publishes_names_the_user_and_topic(tmp_path: Path) -> None:
    lines = [
        f"2024-07-23T14:{6 + i:02d}:19.511120+00:00 [warning] clientid: remote-cmd-6d8f, msg: "
        f"cannot_publish_to_topic_due_to_not_authorized, peername: 10.42.7.19:40312, username: svc-remote-cmd, "
        f"reason: not_authorized, topic: vehicles/V{i}/cmd/req"
        for i in range(12)
    ]
    (tmp_path / "emqx-core-1.log").write_text("\n".join(lines) + "\n")
    d = investigate(load_bundle(tmp_path), "why do remote commands fail?")
    assert d.category == Category.CONFIGURATION_ERROR, d.root_cause
    assert "MQTT broker" in d.root_cause and "svc-remote-cmd" in d.root_cause and "10.42.7.19" not in d.root_cause[:40]


def _valhalla(restart: bool) -> str:
    lines = [
        "2024/05/14 08:47:03.017597 [ERROR] (stat): /data/valhalla/valhalla_tiles.tar No such file or directory",
        "2024/05/14 08:47:03.018780 [WARN] Tile extract could not be loaded",
        "2024/05/14 08:47:03.022873 [INFO] Listening with 4 worker threads",
    ]
    for i in range(12):
        lines += [f"2024/05/14 08:{50 + i}:02.248912 POST /route HTTP/1.1"]
        lines += [f"2024/05/14 08:{50 + i}:02.252059 [WARN] 400::No suitable edges near location"]
        if restart and i == 6:
            lines += ["2024/05/14 08:56:30.000000 [INFO] Listening with 4 worker threads"]
    return "\n".join(lines) + "\n"


def test_a_file_missing_when_the_process_started_stays_missing_until_it_restarts(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "routing"
    logs.mkdir(parents=True)
    (logs / "valhalla-6d8b9c7f54-q2xkt.log").write_text(_valhalla(restart=False))
    d = investigate(load_bundle(tmp_path), "why does every route fail?")
    assert d.category == Category.CONFIGURATION_ERROR and "/data/valhalla/valhalla_tiles.tar" in d.root_cause
    # restarted since: the first start's complaint is not the state now
    (logs / "valhalla-6d8b9c7f54-q2xkt.log").write_text(_valhalla(restart=True))
    d = investigate(load_bundle(tmp_path), "why does every route fail?")
    assert not any(f.code == "file_missing_at_start" for f in d.findings), d.root_cause


_SHOW_IF = """leeds-edge-rtr01#show interfaces GigabitEthernet0/0/1
GigabitEthernet0/0/1 is up, line protocol is up
  Description: WAN-PRIMARY
     0 runts, 0 giants, 0 throttles
     {n} input errors, {crc} CRC, 0 frame, 0 overrun, 0 ignored
     0 output errors, 0 collisions, 6 interface resets
leeds-edge-rtr01#show interfaces GigabitEthernet0/0/1 | include CRC
     {n2} input errors, {crc2} CRC, 0 frame, 0 overrun, 0 ignored
"""


def test_a_routers_show_interfaces_read_twice_shows_crc_errors_climbing(tmp_path: Path) -> None:
    (tmp_path / "leeds-edge-rtr01.txt").write_text(_SHOW_IF.format(n=418733, crc=417902, n2=419516, crc2=418681))
    d = investigate(load_bundle(tmp_path), "why do Leeds agents drop calls?")
    assert d.category == Category.INFRASTRUCTURE, d.root_cause
    assert "GigabitEthernet0/0/1 on leeds-edge-rtr01" in d.root_cause and "crc" in d.root_cause
    # the same count twice: old errors, not a failing link now
    (tmp_path / "leeds-edge-rtr01.txt").write_text(_SHOW_IF.format(n=418733, crc=417902, n2=418733, crc2=417902))
    d = investigate(load_bundle(tmp_path), "why do Leeds agents drop calls?")
    assert not any(f.code == "link_failing" for f in d.findings), d.root_cause


def test_cloudformation_stack_events_are_the_stack_s_log_oldest_first(tmp_path: Path) -> None:
    import json

    def ev(ts: str, rid: str, status: str, reason: str = "") -> dict:
        e = {"StackName": "payments-edge-prod", "LogicalResourceId": rid, "ResourceType": "AWS::Lambda::Function"}
        e |= {"Timestamp": ts, "ResourceStatus": status}
        return e | ({"ResourceStatusReason": reason} if reason else {})

    events = [  # newest first, as the API returns them
        ev("2025-05-14T14:08:33Z", "payments-edge-prod", "UPDATE_ROLLBACK_COMPLETE"),
        ev("2025-05-14T14:06:58Z", "AuthorizerFunction", "UPDATE_FAILED", "Resource handler returned message: null"),
        ev("2025-05-14T14:06:10Z", "AuthorizerFunction", "UPDATE_IN_PROGRESS"),
    ]
    (tmp_path / "events.json").write_text(json.dumps({"StackEvents": events}))
    (log,) = load_bundle(tmp_path).kind("log")
    records = log.data["records"]
    assert [r["level"] for r in records] == ["info", "error", "warn"]
    assert records[1]["msg"].startswith("AuthorizerFunction (AWS::Lambda::Function) UPDATE_FAILED: Resource handler")
