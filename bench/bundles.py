"""Writes a large synthetic evidence bundle in the native formats: `kubectl get pods -o json`, `kubectl get
events -o json` and `kubectl logs --timestamps` files under logs/<namespace>/<pod>/<container>.log.

Full scale: 5,000 pods, 50,000 events, 500,000 log lines (100 per pod). `scale` multiplies every count.
A few pods are really failing (OOMKilled and crash-looping, with their events and error lines) among many
healthy ones, as in a real cluster; the rest is routine noise.

Run: .venv/bin/python -m bench.bundles OUT_DIR [--scale 1.0] [--tar]
"""

from __future__ import annotations

import argparse
import json
import random
import tarfile
import time
from pathlib import Path
from typing import IO, Any

PODS, EVENTS, LOG_LINES = 5_000, 50_000, 500_000
T0 = 1_718_200_800.0  # 2024-06-12T14:00:00Z
NAMESPACES = 50


def iso(ts: float, nanos: bool = False) -> str:
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return f"{base}.{int((ts % 1) * 1e9):09d}Z" if nanos else f"{base}Z"


def pod_names(n: int) -> list[tuple[str, str, str]]:
    """(namespace, pod, app) for n pods."""
    out = []
    for i in range(n):
        ns = f"team-{i % NAMESPACES:02d}"
        app = f"svc-{i % 400:03d}"
        out.append((ns, f"{app}-{i:05d}-{(i * 7919) % 100000:05x}", app))
    return out


def pod_object(ns: str, name: str, app: str, failing: bool, rng: random.Random) -> dict[str, Any]:
    restarts = rng.randint(5, 30) if failing else (1 if rng.random() < 0.05 else 0)
    state: dict[str, Any] = {"running": {"startedAt": iso(T0 - 86_400)}}
    last: dict[str, Any] = {}
    if failing:
        state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off 5m0s restarting failed container=app pod={name}",
            }
        }
        last = {
            "terminated": {
                "exitCode": 137,
                "reason": "OOMKilled",
                "startedAt": iso(T0 + 500),
                "finishedAt": iso(T0 + 560),
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"{rng.getrandbits(128):032x}",
            "labels": {"app": app, "pod-template-hash": name.rsplit("-", 1)[-1]},
            "creationTimestamp": iso(T0 - 86_400),
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name.rsplit("-", 1)[0], "controller": True}
            ],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "time": iso(T0 - 86_400)}],
        },
        "spec": {
            "nodeName": f"node-{rng.randrange(200):03d}",
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/{ns}/{app}:1.{rng.randrange(40)}.{rng.randrange(10)}",
                    "resources": {
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                    },
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}",
            "conditions": [
                {"type": "Ready", "status": "False" if failing else "True", "lastTransitionTime": iso(T0 - 3600)},
                {
                    "type": "ContainersReady",
                    "status": "False" if failing else "True",
                    "lastTransitionTime": iso(T0 - 3600),
                },
            ],
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": not failing,
                    "restartCount": restarts,
                    "state": state,
                    "lastState": last,
                    "image": f"registry.example.com/{ns}/{app}",
                    "containerID": f"containerd://{rng.getrandbits(64):016x}",
                }
            ],
        },
    }


EVENT_KINDS = [
    ("Normal", "Pulled", 'Container image "{image}" already present on machine'),
    ("Normal", "Created", "Created container app"),
    ("Normal", "Started", "Started container app"),
    ("Normal", "Scheduled", "Successfully assigned {ns}/{pod} to {node}"),
    ("Warning", "Unhealthy", 'Readiness probe failed: Get "http://10.0.0.1:8080/healthz": context deadline exceeded'),
    ("Normal", "Killing", "Stopping container app"),
]


def event_object(i: int, ns: str, pod: str, failing: bool, rng: random.Random) -> dict[str, Any]:
    if failing and i % 2 == 0:
        etype, reason, msg = "Warning", "BackOff", "Back-off restarting failed container app in pod {pod}"
    else:
        etype, reason, msg = EVENT_KINDS[rng.randrange(len(EVENT_KINDS))]
    first = T0 + rng.uniform(0, 1800)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod}.{i:016x}", "namespace": ns},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": ns,
            "name": pod,
            "fieldPath": "spec.containers{app}",
        },
        "reason": reason,
        "message": msg.format(image="registry.example.com/app:1.0", ns=ns, pod=pod, node="node-001"),
        "type": etype,
        "count": rng.randint(1, 20),
        "firstTimestamp": iso(first),
        "lastTimestamp": iso(first + rng.uniform(0, 600)),
        "source": {"component": "kubelet", "host": f"node-{rng.randrange(200):03d}"},
        "reportingComponent": "kubelet",
    }


LOG_TEMPLATES = [
    "GET /api/items/{n} 200 {ms}ms",
    '{{"level":"info","ts":"{iso}","msg":"request served","path":"/api/orders/{n}","status":200,"duration_ms":{ms}}}',
    "INFO cache refreshed entries={n} took={ms}ms",
    '{{"level":"debug","ts":"{iso}","msg":"db query","rows":{n},"duration_ms":{ms}}}',
    "WARN slow request path=/api/search q=item{n} took={ms}ms",
]


def log_line(ts: float, failing: bool, rng: random.Random) -> str:
    n, ms = rng.randrange(100_000), rng.randrange(1, 900)
    if failing and rng.random() < 0.3:
        body = f"ERROR upstream payments-api timed out after 5000ms order={n}"
    else:
        body = LOG_TEMPLATES[rng.randrange(len(LOG_TEMPLATES))].format(n=n, ms=ms, iso=iso(ts))
    return f"{iso(ts, nanos=True)} {body}\n"


def write_list(f: IO[str], items: Any) -> None:
    """A kind List written one item at a time, so the generator holds one object, not the whole file."""
    f.write('{"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [\n')
    for n, obj in enumerate(items):
        f.write(("," if n else "") + json.dumps(obj) + "\n")
    f.write("]}\n")


def write_bundle(out: Path, scale: float = 1.0, seed: int = 7) -> dict[str, int]:
    rng = random.Random(seed)
    n_pods, n_events, n_lines = int(PODS * scale), int(EVENTS * scale), int(LOG_LINES * scale)
    pods = pod_names(n_pods)
    failing = {i for i in range(n_pods) if i % 500 == 17}  # 10 of 5,000 pods really fail
    out.mkdir(parents=True, exist_ok=True)
    with (out / "pods.json").open("w") as f:
        write_list(f, (pod_object(ns, name, app, i in failing, rng) for i, (ns, name, app) in enumerate(pods)))
    with (out / "events.json").open("w") as f:
        write_list(
            f,
            (
                event_object(i, pods[i % n_pods][0], pods[i % n_pods][1], (i % n_pods) in failing, rng)
                for i in range(n_events)
            ),
        )
    per_pod = max(1, n_lines // max(n_pods, 1))
    written = 0
    for i, (ns, name, _) in enumerate(pods):
        folder = out / "logs" / ns / name
        folder.mkdir(parents=True, exist_ok=True)
        count = per_pod if i < n_pods - 1 else n_lines - written
        ts = T0
        with (folder / "app.log").open("w") as f:
            for _ in range(count):
                ts += rng.uniform(0.01, 30)
                f.write(log_line(ts, i in failing, rng))
        written += count
    return {"pods": n_pods, "events": n_events, "log_lines": written, "files": n_pods + 2}


def tar_bundle(folder: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        tar.add(folder, arcname=".")
    return archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--tar", action="store_true", help="also write OUT.tar.gz")
    args = parser.parse_args()
    counts = write_bundle(args.out, args.scale)
    if args.tar:
        tar_bundle(args.out, args.out.with_suffix(".tar.gz"))
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
