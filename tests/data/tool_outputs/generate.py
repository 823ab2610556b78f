"""Writes the shipped tool-output corpus (deterministic: seeded). Each case lists the critical facts a
compressed view must keep: error codes, service names, hosts, ports, PIDs, counts and numbers that matter.

Run from the project root: .venv/bin/python tests/data/tool_outputs/generate.py
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).parent
T0 = datetime(2026, 11, 22, 14, 0, 0)


def ts(i: int, step: float = 0.7) -> str:
    return (T0 + timedelta(seconds=i * step)).strftime("%Y-%m-%d %H:%M:%S")


def app_log() -> dict:
    rnd = random.Random(1)
    lines, timeouts = [], 0
    paths = ["/checkout", "/cart", "/products", "/login", "/search"]
    for i in range(700):
        r = rnd.random()
        if 300 < i < 420 and r < 0.5:
            timeouts += 1
            lines.append(
                f"{ts(i)} ERROR [orders-api] upstream timed out after {rnd.randint(2900, 3100)} ms to 10.0.0.5:5432"
            )
        elif 300 < i < 420 and r < 0.6:
            lines.append(f"{ts(i)} WARN [orders-api] connection pool exhausted size=20 waiting={rnd.randint(5, 40)}")
        else:
            lines.append(f"{ts(i)} INFO [orders-api] GET {rnd.choice(paths)} 200 {rnd.randint(3, 80)}ms")
    lines.insert(500, f"{ts(500)} FATAL [orders-api] worker pid=4242 killed by OOM (rss=1843 MB)")
    return {
        "name": "app-log-timeout-burst",
        "tool": "log_search",
        "result": {
            "status": "success",
            "summary": f"{timeouts + 1} error lines in /var/log/orders-api/app.log (last 60 min)",
            "data": {"path": "/var/log/orders-api/app.log", "lines": lines},
        },
        "critical_facts": ["upstream timed out", "10.0.0.5", "5432", "orders-api", "pool exhausted", "size=20",
                           "OOM", "4242", "1843", f"{timeouts}x", "FATAL"],
    }  # fmt: skip


def nginx_log() -> dict:
    rnd = random.Random(2)
    lines, n503 = [], 0
    for i in range(900):
        path = rnd.choice(["/api/checkout", "/api/cart", "/static/app.js", "/api/search"])
        status = 200 if rnd.random() > 0.08 else rnd.choice([502, 503, 503, 504])
        if path == "/api/checkout" and 400 < i < 600 and rnd.random() < 0.6:
            status = 503
        n503 += status == 503
        lines.append(
            f"10.1.{rnd.randint(0, 3)}.{rnd.randint(2, 250)} - - [22/Nov/2026:14:{i // 60:02d}:{i % 60:02d} +0000] "
            f'"GET {path} HTTP/1.1" {status} {rnd.randint(200, 9000)} "-" "Mozilla/5.0"'
        )
    return {
        "name": "nginx-access-5xx",
        "tool": "log_search",
        "result": {"status": "success", "summary": "900 requests, 5xx on /api/checkout", "data": {"lines": lines}},
        "critical_facts": ["503", "502", "504", "/api/checkout", str(n503)],
    }


def cpu_series() -> dict:
    rnd = random.Random(3)
    series = [round(rnd.uniform(8, 22), 1) for _ in range(300)]
    series[211] = 97.5
    series[212] = 93.0
    return {
        "name": "host-cpu-spike",
        "tool": "host_metrics",
        "result": {
            "status": "success",
            "summary": "CPU 15% (2 cores), memory 71%, load 1.9/1.2/0.8",
            "data": {
                "cpu_series": series, "cores": 2, "memory": {"percent": 71.2, "total_gb": 23.5},
                "load": [1.9, 1.2, 0.8],
                "top_processes": [{"pid": 9121, "name": "java", "cpu_percent": 88.5}, {"pid": 77, "name": "postgres", "cpu_percent": 9.1}],
                "findings": [{"severity": "ok", "message": "CPU, memory, disk and load within normal limits"}],
            },
        },
        "critical_facts": ["97.5", "#211", "93", "71.2", "9121", "java", "88.5"],
    }  # fmt: skip


def postgres() -> dict:
    rnd = random.Random(4)
    long = [{"pid": 31337, "usename": "app", "datname": "orders", "running_s": 412.7,
             "query": "UPDATE orders SET status = 'paid' WHERE id = $1"}]  # fmt: skip
    long += [
        {"pid": 31000 + i, "usename": "app", "datname": "orders", "running_s": round(rnd.uniform(6, 40), 1),
         "query": f"SELECT * FROM order_items WHERE order_id = {rnd.randint(1000, 9999)}"}
        for i in range(30)
    ]  # fmt: skip
    blocked = [
        {"pid": 31400 + i, "blocked_by": [31337], "query": "UPDATE orders SET status = $1 WHERE id = $2"}
        for i in range(12)
    ]
    return {
        "name": "postgres-lock-chain",
        "tool": "postgres_activity",
        "result": {
            "status": "success",
            "summary": "PostgreSQL orders: 88/100 connections, 31 long, 12 blocked",
            "data": {
                "connections": 88, "max_connections": 100, "by_state": {"active": 44, "idle": 31, "idle in transaction": 13},
                "long_queries": long, "blocked": blocked,
                "findings": [{"severity": "critical", "message": f"pid {b['pid']} blocked by [31337]"} for b in blocked]
                + [{"severity": "warn", "message": "88 of 100 connections in use"}],
            },
        },
        "critical_facts": ["31337", "412.7", "UPDATE orders", "blocked by [31337]", "88", "100", "idle in transaction"],
    }  # fmt: skip


def repeated_findings() -> dict:
    findings = [{"severity": "critical", "message": "disk /var 91% full"}] * 40
    findings += [{"severity": "warn", "message": "disk /home 83% full"}] * 25
    findings += [
        {"severity": "ok", "message": f"endpoint https://svc-{i}.internal/healthz answered 200"} for i in range(40)
    ]
    return {
        "name": "repeated-findings",
        "tool": "host_metrics",
        "result": {"status": "success", "summary": "disks filling", "data": {"findings": findings}},
        "critical_facts": ["/var", "91%", "/home", "83%", "x40", "x25"],
    }


if __name__ == "__main__":
    for case in [app_log(), nginx_log(), cpu_series(), postgres(), repeated_findings()]:
        (HERE / f"{case['name']}.json").write_text(json.dumps(case, indent=1))
        print(case["name"], len(json.dumps(case["result"])), "chars")
