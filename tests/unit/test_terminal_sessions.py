"""Docker hosts (`docker inspect`, `docker ps -a`) and saved terminal sessions: each command's output read as a
file of its own, a log named by the command that printed it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from diagnosis.bundle import load_bundle
from diagnosis.formats.base import terminal_segments
from diagnosis.investigate import investigate
from diagnosis.model import Category

DATA = Path(__file__).resolve().parent.parent / "data" / "docker"


def test_docker_inspect_oom_killed_names_the_container_and_its_limit(tmp_path: Path) -> None:
    shutil.copy(DATA / "inspect-oom.json", tmp_path / "thumbnailer.json")
    ev = load_bundle(tmp_path)
    (state,) = ev.kind("container/state")
    assert state.data["oom_killed"] and state.data["exit_code"] == 137 and state.data["restart_count"] == 23
    diagnosis = investigate(ev, "thumbnails are not generated")
    assert diagnosis.category == Category.RESOURCE_EXHAUSTION
    assert "thumbnailer" in diagnosis.root_cause and "512MiB" in diagnosis.root_cause


def test_a_session_of_docker_ps_and_docker_logs_reads_both(tmp_path: Path) -> None:
    shutil.copy(DATA / "compose-host.txt", tmp_path / "session.txt")
    ev = load_bundle(tmp_path)
    states = {i.data["name"]: i.data for i in ev.kind("container/state")}
    assert states["shop-api"]["restarting"] and states["shop-api"]["exit_code"] == 1
    assert states["shop-db"]["health"]["status"] == "healthy"
    (log,) = ev.kind("log")
    assert log.object == "container/shop-api"  # named by `docker logs ... shop-api`, not by the file
    assert log.data["records"][0]["line"] == 7  # line numbers stay those of the file
    diagnosis = investigate(ev, "shop-api keeps restarting")
    # the restart is a symptom; what the container's own log shows is the cause
    assert "shop-api" in diagnosis.root_cause and "PAYMENT_API_KEY" in diagnosis.root_cause


def test_json_under_its_command_and_kubectl_logs_in_one_paste(tmp_path: Path) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "api-7d9f-x2kqp", "namespace": "shop"},
        "spec": {"containers": [{"name": "api", "image": "api:1"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "api", "ready": True, "restartCount": 0}]},
    }
    (tmp_path / "paste.txt").write_text(
        "$ kubectl get pod api-7d9f-x2kqp -n shop -o json\n"
        + json.dumps(pod, indent=2)
        + "\n$ kubectl logs api-7d9f-x2kqp -n shop -c api --previous\n"
        "[2026-11-17 11:02:42 +0000] ERROR request failed\n"
        "$ kubectl get pods -n shop -o json | jq .items[0].status.phase\n"
    )
    ev = load_bundle(tmp_path)
    assert [i.object for i in ev.kind("k8s/Pod")] == ["Pod/shop/api-7d9f-x2kqp"]
    (log,) = ev.kind("log")
    assert log.object == "Pod/shop/api-7d9f-x2kqp/api" and log.data["source"]["previous"] is True
    assert not ev.errors


def test_a_file_with_one_prompt_or_none_is_not_cut() -> None:
    assert terminal_segments("$ df -h\nFilesystem Size Used Avail Use% Mounted on\n") is None
    assert terminal_segments("2026-11-17 ERROR x\n# not a prompt: a comment\n# another one\n") is None


def _inspect(name: str, state: dict[str, object], **extra: object) -> dict[str, object]:
    return {"Id": f"{name}0123456789", "Name": f"/{name}", "State": state, "Config": {"Image": f"{name}:1"}, **extra}


def test_container_start_errors_old_oom_kills_and_health(tmp_path: Path) -> None:
    containers = [
        _inspect(
            "worker",
            {
                "Status": "exited",
                "ExitCode": 127,
                "Error": 'OCI runtime create failed: exec: "/app/worker": stat /app/worker: no such file or directory',
                "FinishedAt": "2026-11-17T10:00:00Z",
                "OOMKilled": False,
            },
        ),
        _inspect(
            "cache",
            {
                "Status": "running",
                "Running": True,
                "OOMKilled": True,
                "ExitCode": 0,
                "FinishedAt": "2026-11-10T03:00:00Z",
            },
        ),
        _inspect(
            "api",
            {
                "Status": "running",
                "Running": True,
                "StartedAt": "2026-11-17T09:58:00Z",
                "Health": {
                    "Status": "unhealthy",
                    "FailingStreak": 7,
                    "Log": [{"ExitCode": 1, "Output": "curl: (7) Failed to connect"}],
                },
            },
        ),
    ]
    (tmp_path / "inspect.json").write_text(json.dumps(containers))
    diagnosis = investigate(load_bundle(tmp_path), "the worker is down")
    assert diagnosis.category == Category.CONFIGURATION_ERROR
    assert "worker" in diagnosis.root_cause and "no such file or directory" in diagnosis.root_cause
    ruled_out = " ".join(r.alternative for r in diagnosis.ruled_out)
    assert "cache" in ruled_out  # an OOM kill a week ago is history
    codes = {f.code for f in diagnosis.findings}
    assert {"container_start_error", "old_container_oom", "unhealthy"} <= codes


def test_one_command_pasted_above_its_output_names_the_log(tmp_path: Path) -> None:
    """A single `docker logs` pasted with its prompt (not a session of several commands): the container it names
    is the log's source, whatever flags and redirections the command carries."""
    (tmp_path / "out.txt").write_text(
        "deploy@web-1:/srv$ docker logs --since 2024-07-23T13:40:00 --tail 500 edge-nginx 2>&1 | tail -n 400\n"
        + "".join(
            f"2024-07-23T13:4{i}:00Z [error] connect() failed (111: Connection refused) while connecting to upstream\n"
            for i in range(5)
        )
    )
    (log,) = load_bundle(tmp_path).kind("log")
    assert log.object == "container/edge-nginx"


def test_refusals_on_a_port_no_running_container_listens_on_are_the_callers_configuration(tmp_path: Path) -> None:
    """nginx proxies to 172.20.0.7:9000; `docker ps` (a --format table of some columns) shows every container up,
    none on 9000: the upstream's port in nginx's configuration is wrong, not a failing dependency."""
    (tmp_path / "ps.txt").write_text(
        "ops@host:~$ docker ps --format 'table {{.Names}}\\t{{.Status}}\\t{{.Ports}}'\n"
        "NAMES           STATUS                 PORTS\n"
        "edge-nginx      Up 3 weeks             0.0.0.0:80->80/tcp\n"
        "invoicing-api   Up 6 days (healthy)    8000/tcp\n"
        "redis           Up 3 weeks (healthy)   6379/tcp\n"
        "ops@host:~$ uptime\n 14:50:01 up 21 days,  3:02,  1 user,  load average: 0.21, 0.30, 0.28\n"
    )
    (tmp_path / "nginx-error.log").write_text(
        "".join(
            f"2024/07/23 14:{10 + i:02d}:00 [error] 43#43: *{1000 + i} connect() failed (111: Connection refused)"
            ' while connecting to upstream, client: 10.1.1.1, server: app, request: "GET /api/invoices HTTP/1.1", '
            'upstream: "http://172.20.0.7:9000/invoices", host: "app"\n'
            for i in range(12)
        )
    )
    ev = load_bundle(tmp_path)
    states = {i.object: i.data for i in ev.kind("container/state")}
    assert states["container/invoicing-api"]["ports"] == [8000] and states["container/edge-nginx"]["ports"] == [80]
    diagnosis = investigate(ev, "why do invoice pages fail with 502?")
    assert diagnosis.category == Category.CONFIGURATION_ERROR, diagnosis.root_cause
    assert "9000" in diagnosis.root_cause and "8000" in diagnosis.root_cause
