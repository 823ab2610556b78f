"""Command output an operator saves from a host: `df` (space: -h, -k, -P, -T) and `df -i` (inodes) as a
`host/snapshot` item, and `redis-cli INFO` as a `redis/info` item - the same shapes the live tools write, so the host
and database analyzers read them unchanged. `iostat -x` (its last report: the first is the average since boot) adds
`io: [{device, util, await_ms, queue}]` and `iowait` to a host snapshot, `pidstat -d` the processes doing the I/O
(`io_processes: [{pid, command, read_kbs, write_kbs}]`); both name the host from their `Linux ... (host)` line.

`df` prints no host name and no time: the object is the file (`host/<path>`) and ts is None.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

from diagnosis.formats._time import parse_ts
from diagnosis.formats.base import FORMATS, PROMPT_HOST, Document, ParseContext
from diagnosis.model import EvidenceItem

_DF_HEADER = re.compile(r"^Filesystem\s+(?:Type\s+)?(?P<cols>.*?)\s+Mounted on\s*$", re.I)
_PCT = re.compile(r"^(\d{1,3})%$")


# a shell prompt with the command that printed the output ("$ df -h /data", "# kubectl exec ... -- df -i")
_PROMPT = re.compile(r"^(?:[\w@.\-:~/]*[$#>]|\$|#|>)\s+\S")


def _df_header(doc: Document) -> tuple[bool, int] | None:
    """(inodes?, index of the Use% column) when the first non-blank line that is not a prompt is a df header."""
    for line in doc.lines():
        if not line.strip() or _PROMPT.match(line.strip()):
            continue
        m = _DF_HEADER.match(line.strip())
        if not m:
            return None
        cols = m["cols"].split()
        names = [c.lower() for c in cols]
        pct = next((i for i, c in enumerate(names) if c in ("use%", "iuse%", "capacity")), None)
        if pct is None:
            return None
        return "iuse%" in names or "inodes" in names, pct
    return None


def detect_df(doc: Document) -> bool:
    return _df_header(doc) is not None


@FORMATS.format("df", shapes={"text"}, detect=detect_df, order=20)
def parse_df(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    header = _df_header(doc)
    assert header is not None
    inodes, pct_col = header
    lines = list(doc.lines())
    start = next(i for i, line in enumerate(lines) if _DF_HEADER.match(line.strip()))
    has_type = bool(re.match(r"^Filesystem\s+Type\b", lines[start].strip(), re.I))
    disks: list[dict[str, Any]] = []
    pending = ""
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        if _PROMPT.match(line.strip()) or _DF_HEADER.match(line.strip()):
            break  # the next command's output (du, a second df): not this table
        fields = (pending + " " + line).split() if pending else line.split()
        if len(fields) == 1:  # a long device name wraps onto its own line (df without -P)
            pending = fields[0]
            continue
        pending = ""
        values = fields[1 + has_type :]
        if len(values) < pct_col + 2:
            continue
        m = _PCT.match(values[pct_col])
        if not m:
            continue
        mount = " ".join(values[pct_col + 1 :])
        entry: dict[str, Any] = {"mount": mount, "device": fields[0]}
        entry["inodes_percent" if inodes else "percent"] = float(m[1])
        disks.append(entry)
    yield ctx.item(doc.path, "host/snapshot", f"host/{doc.path}", {"disks": disks, "source": "df"}, None)


# --- iostat -x and pidstat -d ----------------------------------------------------------------------------------

_SYSSTAT_HOST = re.compile(r"^Linux \S+ \((?P<host>[^)]+)\)", re.M)
_IOSTAT_HEADER = re.compile(r"^Device:?\s+.*%util\s*$")
_PIDSTAT_IO_HEADER = re.compile(r"^\S+(?:\s+[AP]M)?\s+UID\s+PID\s+kB_rd/s\s+kB_wr/s.*Command\s*$")


# iotop -b: "    PID  PRIO  USER     DISK READ  DISK WRITE  SWAPIN      IO    COMMAND"
_IOTOP_HEADER = re.compile(r"^\s*(?:PID|TID)\s+PRIO\s+USER\s+DISK READ\s+DISK WRITE\b")
_IOTOP_ROW = re.compile(
    r"^\s*(?P<pid>\d+)\s+\S+\s+\S+\s+(?P<rd>[\d.]+) (?P<ru>[KMGT]?)B?/s\s+(?P<wr>[\d.]+) (?P<wu>[KMGT]?)B?/s\s+"
    r"(?:\?unavailable\?|[\d.]+ %)\s+(?:[\d.]+ %\s+)?(?P<cmd>.+?)\s*$"
)
_RATE_KB = {"": 1 / 1024, "K": 1.0, "M": 1024.0, "G": 1024.0**2, "T": 1024.0**3}  # iotop: B/s, K/s, M/s
# the host a pasted command ran on, from its prompt: "ops@tt-worker-2:~$ iostat -x"


def detect_iostat(doc: Document) -> bool:
    head = doc.text[:8192]
    lines = head.splitlines()
    return (
        ("%util" in head and any(_IOSTAT_HEADER.match(line.strip()) for line in lines))
        or ("kB_wr/s" in head and any(_PIDSTAT_IO_HEADER.match(line.strip()) for line in lines))
        or ("DISK WRITE" in head and any(_IOTOP_HEADER.match(line) for line in lines))
    )


def _iotop(lines: list[str]) -> list[dict[str, Any]]:
    procs: list[dict[str, Any]] = []
    seen = False
    for line in lines:
        if _IOTOP_HEADER.match(line):
            seen, procs = True, []
            continue
        m = _IOTOP_ROW.match(line) if seen else None
        if m:
            procs.append({"pid": int(m["pid"]), "command": m["cmd"].split()[0].strip("[]"),
                          "read_kbs": float(m["rd"]) * _RATE_KB[m["ru"]],
                          "write_kbs": float(m["wr"]) * _RATE_KB[m["wu"]]})  # fmt: skip
    return sorted(procs, key=lambda p: p["read_kbs"] + p["write_kbs"], reverse=True)


def _iostat_devices(lines: list[str]) -> list[dict[str, Any]]:
    """The devices of the last report (each report is a header and its rows)."""
    report: list[dict[str, Any]] = []
    cols: list[str] = []
    for line in lines:
        text = line.strip()
        if _IOSTAT_HEADER.match(text):
            cols = [c.rstrip(":").lower() for c in text.split()]
            report = []
            continue
        fields = text.split()
        if not cols or len(fields) != len(cols) or not re.match(r"^[\d.,]+$", fields[-1]):
            continue
        row = dict(zip(cols, fields, strict=True))
        num = {k: float(v.replace(",", ".")) for k, v in row.items() if re.match(r"^[\d.,]+$", v)}
        waits = [num[k] for k in ("r_await", "w_await", "await") if k in num]
        report.append(
            {
                "device": row["device"],
                "util": num.get("%util"),
                "await_ms": max(waits) if waits else None,
                "queue": num.get("aqu-sz", num.get("avgqu-sz")),
                "write_kbs": num.get("wkb/s"),
                "read_kbs": num.get("rkb/s"),
            }
        )
    return report


def _iowait(lines: list[str]) -> float | None:
    last = None
    for a, b in itertools.pairwise(lines):
        if a.strip().startswith("avg-cpu:") and "%iowait" in a:
            cols, vals = a.split()[1:], b.split()
            if len(cols) == len(vals):
                last = float(vals[cols.index("%iowait")].replace(",", "."))
    return last


def _pidstat_io(lines: list[str]) -> list[dict[str, Any]]:
    procs: list[dict[str, Any]] = []
    cols: list[str] = []
    for line in lines:
        text = line.strip()
        if _PIDSTAT_IO_HEADER.match(text):
            fields = text.split()
            cols = fields[fields.index("UID") :]
            procs = []  # the last interval (or the Average block) wins
            continue
        fields = text.split()
        if not cols or len(fields) < len(cols) + 1:
            continue
        row = dict(zip(cols, fields[len(fields) - len(cols) :], strict=True))
        try:
            procs.append({"pid": int(row["PID"]), "command": row["Command"], "read_kbs": float(row["kB_rd/s"]),
                          "write_kbs": float(row["kB_wr/s"])})  # fmt: skip
        except (KeyError, ValueError):
            continue
    return sorted(procs, key=lambda p: p["read_kbs"] + p["write_kbs"], reverse=True)


@FORMATS.format("iostat", shapes={"text"}, detect=detect_iostat, order=20)
def parse_iostat(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    lines = list(doc.lines())
    host = _SYSSTAT_HOST.search(doc.text) or PROMPT_HOST.search(doc.text[:2048])
    data: dict[str, Any] = {"source": "iostat"}
    devices = _iostat_devices(lines)
    if devices:
        data["io"] = devices
        data["iowait"] = _iowait(lines)
    procs = _pidstat_io(lines) or _iotop(lines)
    if procs:
        data["io_processes"] = procs[:10]
        data["source"] = "iostat" if devices else "pidstat"
    yield ctx.item(doc.path, "host/snapshot", f"host/{host['host'] if host else doc.path}", data, None)


_REDIS_SECTION = re.compile(r"^# (Server|Clients|Memory|Persistence|Stats|Replication|CPU|Keyspace)\s*$", re.M)
_REDIS_KV = re.compile(r"^([a-z_][a-z0-9_]*):(.*)$")


def detect_redis_info(doc: Document) -> bool:
    head = doc.text[:4096]
    return len(_REDIS_SECTION.findall(head)) >= 1 and ("used_memory:" in doc.text or "redis_version:" in head)


@FORMATS.format("redis_info", shapes={"text"}, detect=detect_redis_info, order=20)
def parse_redis_info(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    info: dict[str, Any] = {}
    for line in doc.lines():
        m = _REDIS_KV.match(line.strip())
        if not m:
            continue
        raw = m[2].strip()
        info[m[1]] = int(raw) if raw.lstrip("-").isdigit() else raw
    server = f"{doc.stem}:{info['tcp_port']}" if "tcp_port" in info else doc.stem
    data = {
        "server": server,
        "healthy": True,
        "used_memory_bytes": info.get("used_memory"),
        "maxmemory_bytes": info.get("maxmemory"),
        "maxmemory_policy": info.get("maxmemory_policy"),
        "evicted_keys": info.get("evicted_keys"),
        "info": info,
    }
    yield ctx.item(doc.path, "redis/info", f"redis/{server}", data, None)


# --- redis-cli SLOWLOG GET ------------------------------------------------------------------------------------------
#   1) 1) (integer) 88412          id
#      2) (integer) 1720438501     unix time
#      3) (integer) 1412877        microseconds
#      4) 1) "KEYS"                the command and its arguments
#         2) "cart:*"
#      5) "10.31.6.44:40212"       client address (Redis 4+)
#      6) "cart-janitor"           client name
_SLOW_ENTRY = re.compile(r"^\s*\d+\) 1\) \(integer\) (\d+)\s*$", re.M)
_SLOW_FIELD = re.compile(r"^\s*(\d)\) (?:\(integer\) (\d+)|(?:1\) )?\"(.*)\")\s*$")
_SLOW_ARG = re.compile(r"^\s*\d+\) \"(.*)\"\s*$")
_REDIS_HOST = re.compile(r"(?:^|\s)-h\s+(\S+)")


def detect_redis_slowlog(doc: Document) -> bool:
    head = doc.text[:8192]
    if "(integer)" not in head:
        return False
    return len(_SLOW_ENTRY.findall(head)) >= 1 and bool(re.search(r"^\s+2\) \(integer\) 1[5-9]\d{8}\s*$", head, re.M))


@FORMATS.format("redis-slowlog", shapes={"text"}, detect=detect_redis_slowlog, order=20)
def parse_redis_slowlog(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """`redis-cli SLOWLOG GET`: each entry's time, duration, command, client address and name."""
    entries: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    field = field_indent = 0
    for n, line in enumerate(doc.lines(), 1):
        if m := _SLOW_ENTRY.match(line):
            cur = {"id": int(m[1]), "line": n, "args": []}
            entries.append(cur)
            field = 1
            continue
        if cur is None:
            continue
        indent = len(line) - len(line.lstrip())
        if field == 4 and indent > field_indent and (a := _SLOW_ARG.match(line)):
            cur["args"].append(a[1])  # an argument, indented under "4) 1) <command>"
            continue
        if f := _SLOW_FIELD.match(line):
            field, field_indent = int(f[1]), indent
            if field == 2 and f[2]:
                cur["ts"] = float(f[2])
            elif field == 3 and f[2]:
                cur["us"] = int(f[2])
            elif field == 4 and f[3] is not None:
                cur["args"].append(f[3])
            elif field == 5 and f[3] is not None:
                cur["addr"] = f[3]
            elif field == 6 and f[3] is not None:
                cur["client"] = f[3]
    entries = [e for e in entries if "ts" in e and "us" in e and e["args"]]
    if not entries:
        return
    host = _REDIS_HOST.search(doc.command or "")
    server = host[1] if host else doc.stem
    data = {"server": server, "entries": entries}
    yield ctx.item(doc.path, "redis/slowlog", f"redis/{server}", data, max(e["ts"] for e in entries))


# --- /etc/resolv.conf ------------------------------------------------------------------------------------------

_RESOLV_LINE = re.compile(r"^\s*(?:nameserver|search|domain|options|sortlist)\s+\S|^\s*[#;]|^\s*$")
_NAMESERVER = re.compile(r"^\s*nameserver\s+(\S+)")
_RESOLV_OPTION = re.compile(r"\b(timeout|attempts):(\d+)")


def detect_resolv(doc: Document) -> bool:
    """A resolver configuration: nameserver lines, and nothing but resolv.conf keywords and comments."""
    if "nameserver" not in doc.text[:4096]:
        return False
    lines = list(itertools.islice((line for line in doc.lines() if not _PROMPT.match(line.strip())), 60))
    return any(_NAMESERVER.match(line) for line in lines) and all(_RESOLV_LINE.match(line) for line in lines)


@FORMATS.format("resolv-conf", shapes={"text"}, detect=detect_resolv, order=20)
def parse_resolv(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """The nameservers in the order the resolver asks them, and its timeout and attempts (glibc: 5 s and 2)."""
    servers: list[str] = []
    options: dict[str, int] = {}
    for n, line in enumerate(doc.lines(), 1):
        m = _NAMESERVER.match(line)
        if m:
            servers.append(m.group(1))
            options.setdefault(f"line:{m.group(1)}", n)
        for key, value in _RESOLV_OPTION.findall(line):
            options[key] = int(value)
    data = {
        "nameservers": servers,
        "timeout_s": options.get("timeout", 5),
        "attempts": options.get("attempts", 2),
        "lines": {s: options[f"line:{s}"] for s in servers},
        "command": doc.command,
    }
    yield ctx.item(doc.path, "host/resolv", f"resolv.conf {doc.path}", data)


# --- `chronyc sources`: the time sources chronyd was given, each with its state and reachability ------------------
# "^? ntp-legacy01.dmz.corp.ex>     0  10     0     -     +0ns[   +0ns] +/-    0ns": mode (^ server, = peer,
# # local clock), state (* selected, + combined, - not combined, x may be in error, ~ too variable, ? unusable),
# name, stratum, poll, reach (octal register of the last 8 polls), LastRx ("-": nothing received since chronyd started)
_CHRONY_HEAD = re.compile(r"^MS Name/IP address\s+Stratum\s+Poll\s+Reach\s+LastRx", re.M)
_CHRONY_SOURCE = re.compile(
    r"^(?P<mode>[\^=#])(?P<state>[*+\-x~?]) (?P<name>\S+)\s+(?P<stratum>\d+)\s+(?P<poll>-?\d+)\s+"
    r"(?P<reach>[0-7]{1,3})\s+(?P<lastrx>\S+)"
)


def detect_chrony_sources(doc: Document) -> bool:
    return "Reach" in doc.text[:8192] and bool(_CHRONY_HEAD.search(doc.text[:8192]))


@FORMATS.format("chrony-sources", shapes={"text"}, detect=detect_chrony_sources, order=20)
def parse_chrony_sources(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `host/time_sources` item: each source with its state, reach and whether anything was ever received;
    the prompt names the host."""
    sources = []
    for n, line in enumerate(doc.lines(), 1):
        m = _CHRONY_SOURCE.match(line.strip())
        if m:
            sources.append(
                {
                    "name": m["name"].rstrip(">"),
                    "mode": m["mode"],
                    "state": m["state"],
                    "reach": int(m["reach"], 8),
                    "never_received": m["lastrx"] == "-",
                    "line": n,
                }
            )
    if not sources:
        return
    prompt = PROMPT_HOST.search(doc.text)
    host = prompt["host"] if prompt else None
    data = {"host": host, "sources": sources, "command": doc.command}
    yield ctx.item(doc.path, "host/time_sources", f"time sources of {host or doc.path}", data)


# --- ping's summary: "--- 10.31.4.112 ping statistics ---" / "100 packets transmitted, 64 received, 36% packet loss"
_PING_HEAD = re.compile(r"^--- (?P<target>\S+) ping statistics ---\s*$")
_PING_SUM = re.compile(
    r"^(?P<sent>\d+) packets transmitted, (?P<recv>\d+) (?:packets )?received,"
    r"(?: \+\d+ errors,)?(?: \+\d+ duplicates,)? (?P<loss>[\d.]+)% packet loss"
)
_PING_RTT = re.compile(r"^(?:rtt|round-trip) min/avg/max/(?:mdev|stddev) = [\d.]+/(?P<avg>[\d.]+)/")


def detect_ping(doc: Document) -> bool:
    head = doc.text[:65536]  # a saved ping run is short; a log is not searched end to end for one
    return "ping statistics ---" in head and "packet loss" in head


@FORMATS.format("ping", shapes={"text"}, detect=detect_ping, order=20)
def parse_ping(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One item per ping run: its target, packets sent and received, the loss and the mean round trip; the
    prompt the command ran at (a debug container in a pod, a node) names where it was sent from."""
    target: str | None = None
    line_no = 0
    origin = ""
    for n, raw in enumerate(doc.lines(), 1):
        line = raw.strip()
        prompt = re.match(r"^(?:[\w.\-]+@)?(?P<host>[\w.\-]+):[^\s$#]*[$#]\s*ping\b", line)
        if prompt:
            origin = prompt["host"]
        head = _PING_HEAD.match(line)
        if head:
            target, line_no = head["target"], n
            continue
        m = _PING_SUM.match(line)
        if m and target:
            sent, recv = int(m["sent"]), int(m["recv"])
            data: dict[str, Any] = {
                "target": target,
                "sent": sent,
                "received": recv,
                "loss_pct": float(m["loss"]),
                "line": line_no,
                "from": origin or None,
                "command": doc.command,
            }
            nxt = next(itertools.islice(doc.lines(), n, n + 1), "")
            rtt = _PING_RTT.match(nxt.strip())
            if rtt:
                data["rtt_avg_ms"] = float(rtt["avg"])
            yield ctx.item(doc.path, "net/ping", f"ping {target}", data)
            target = None


# --- a network interface's counters: `ethtool -S <dev>` ("rx_crc_errors: 412877") and `ip -s link` (RX/TX blocks)
_ETHTOOL_CMD = re.compile(r"ethtool\s+(?:-S|--statistics)\s+(?P<dev>[\w.\-]+)")
_IP_LINK = re.compile(r"^\d+: (?P<dev>[\w.\-@]+): <")
_COUNTER = re.compile(r"^\s*(?P<name>[a-z][\w\[\].]*):\s+(?P<value>\d+)\s*$")
_ERROR_COUNTER = re.compile(r"err|crc|frame|fifo|drop|missed|collision|carrier", re.I)


def detect_nic(doc: Document) -> bool:
    head = doc.text[:65536]
    return "NIC statistics:" in head or bool(re.search(r"^\s+RX:?\s+bytes\s+packets\s+errors", head, re.M))


@FORMATS.format("nic-counters", shapes={"text"}, detect=detect_nic, order=21)
def parse_nic(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `host/nic` item per interface: its error and drop counters (cumulative since boot: a count, not a rate),
    the host named by the prompt the commands ran at."""
    host = ""
    devices: dict[str, dict[str, int]] = {}
    first: dict[str, dict[str, int]] = {}
    current: str | None = None
    ip_block: tuple[str, list[str]] | None = None  # (device, the column names of the RX/TX line just read)
    for raw in doc.lines():
        line = raw.rstrip()
        if (p := PROMPT_HOST.match(line)) and not host:
            host = p["host"]
        if (m := _ETHTOOL_CMD.search(line)) and _PROMPT.match(line.strip()):
            current, ip_block = m["dev"], None
            continue
        if m := _IP_LINK.match(line):
            current, ip_block = m["dev"].split("@")[0], None
            continue
        stripped = line.strip()
        if current and re.match(r"^(RX|TX):?\s+bytes\s+packets", stripped):
            ip_block = (stripped.split()[0].rstrip(":").lower(), stripped.split()[1:])
            continue
        if current and ip_block and re.match(r"^\d+(\s+\d+)+$", stripped):
            direction, cols = ip_block
            for col, value in zip(cols, stripped.split(), strict=False):
                if _ERROR_COUNTER.search(col):
                    devices.setdefault(current, {})[f"{direction}_{col}"] = int(value)
            ip_block = None
            continue
        if current and (c := _COUNTER.match(line)) and _ERROR_COUNTER.search(c["name"]):
            devices.setdefault(current, {})[c["name"]] = int(c["value"])
            first.setdefault(current, {}).setdefault(c["name"], int(c["value"]))
    for dev, counters in devices.items():
        where = f"{host}/{dev}" if host else f"{doc.path}/{dev}"
        data = {"device": dev, "host": host or None, "counters": counters}
        # the same counters read twice (`ethtool -S`, a minute later again): the first reading, to see them climb
        if first.get(dev) and first[dev] != counters:
            data["first_counters"] = first[dev]
        yield ctx.item(doc.path, "host/nic", f"nic/{where}", data)


# --- a network device's `show interfaces` (Cisco IOS/IOS-XE/NX-OS, Arista EOS): each interface's error counters ------
# "GigabitEthernet0/0/1 is up, line protocol is up" then "     418681 input errors, 417902 CRC, 0 frame, ..." and
# "     0 output errors, 0 collisions, 6 interface resets"; the prompt ("leeds-edge-rtr01#show ...") names the device
_IF_HEAD = re.compile(r"^(?P<dev>[A-Z][\w\-]*\d[\w/.:]*) is (?:up|down|administratively down)(?:, line protocol is)?")
_SHOW_IF = re.compile(r"^(?P<host>[\w.\-]+)[#>]\s*show int(?:erfaces?)? (?P<dev>[A-Z][\w\-]*\d[\w/.:]*)", re.I)
_IF_COUNTS = re.compile(r"(?P<n>\d+) (?P<name>input errors|CRC|frame|overrun|ignored|output errors|collisions|"
                        r"interface resets|runts|giants|symbol|alignment)\b", re.I)  # fmt: skip
_DEVICE_PROMPT = re.compile(r"^(?P<host>[\w.\-]+)[#>]\s*(?:show|sh)\b", re.M)


def detect_show_interfaces(doc: Document) -> bool:
    head = doc.text[:65536]
    return " input errors, " in head and bool(re.search(r"\d+ input errors, \d+ CRC", head))


@FORMATS.format("show-interfaces", shapes={"text"}, detect=detect_show_interfaces, order=21)
def parse_show_interfaces(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `host/nic` item per reading of an interface's counters (a device read twice a minute apart: two
    items, in order, so a climbing CRC count shows); the device's prompt names the host."""
    prompt = _DEVICE_PROMPT.search(doc.text)
    host = prompt["host"] if prompt else ""
    current: str | None = None
    counters: dict[str, int] = {}

    def reading() -> Iterator[EvidenceItem]:
        if current and counters:
            data = {"device": current, "host": host or None, "counters": dict(counters)}
            yield ctx.item(doc.path, "host/nic", f"nic/{host or doc.path}/{current}", data)

    for raw in doc.lines():
        line = raw.rstrip()
        m = _SHOW_IF.match(line.strip()) or _IF_HEAD.match(line)
        if m:
            if m["dev"] != current or counters:
                yield from reading()
                counters = {}
            current = m["dev"]
            continue
        if current:
            for c in _IF_COUNTS.finditer(line):
                counters[c["name"].lower().replace(" ", "_")] = int(c["n"])
    yield from reading()


# --- `systemctl cat UNIT`: the unit file and its drop-ins, each after a "# /path" line --------------------------
_UNIT_FILE = re.compile(
    r"^# (?P<path>/\S+/(?P<unit>[\w@.\-]+\.(?:service|socket|timer|mount))(?:\.d/[\w.\-]+\.conf)?)\s*$"
)
_DIRECTIVE = re.compile(r"^(?P<key>[A-Z][A-Za-z]+)=(?P<value>.*)$")


def detect_unit_files(doc: Document) -> bool:
    head = doc.text[:8000]
    return bool(re.search(_UNIT_FILE.pattern, head, re.M)) and "[Service]" in head


@FORMATS.format("systemd-unit", shapes={"text"}, detect=detect_unit_files, order=20)
def parse_unit_files(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `systemd/unit` item per unit: its directives as the drop-ins leave them (a later file's value wins; the
    path lists, ReadWritePaths and the like, add up), and the files they came from."""
    units: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for n, raw in enumerate(doc.lines(), 1):
        line = raw.strip()
        if m := _UNIT_FILE.match(line):
            current = units.setdefault(m["unit"], {"unit": m["unit"], "files": [], "directives": {}, "lines": {}})
            current["files"].append(m["path"])
            continue
        if current is None or not (d := _DIRECTIVE.match(line)):
            continue
        key, value = d["key"], d["value"].strip()
        if key.endswith("Paths") and key in current["directives"] and value:
            value = f"{current['directives'][key]} {value}"
        current["directives"][key] = value
        current["lines"][key] = n
    for name, data in units.items():
        yield ctx.item(doc.path, "systemd/unit", f"unit/{name.removesuffix('.service')}", data)


# --- `top -b` and `free`: memory and swap in use, and the processes holding the most -------------------------------
_TOP_MEM = re.compile(
    r"^(?P<unit>[KMG]iB) Mem\s*:\s*(?P<total>[\d.]+) total,\s*(?P<free>[\d.]+) free,\s*(?P<used>[\d.]+) used"
)
_TOP_SWAP = re.compile(
    r"^[KMG]iB Swap\s*:\s*(?P<total>[\d.]+) total,\s*(?P<free>[\d.]+) free,\s*(?P<used>[\d.]+) used\.\s*"
    r"(?P<avail>[\d.]+) avail Mem"
)
_TOP_HEADER = re.compile(r"^\s*PID\s+USER\s+PR\s+NI\s+VIRT\s+RES\s+SHR\s+S\s+%CPU\s+%MEM\s+TIME\+\s+COMMAND")
_FREE_HEADER = re.compile(r"^\s*total\s+used\s+free\s+shared\s+buff/cache\s+available\s*$")


_SIZE_UNITS = {"": 1.0, "B": 1.0, "K": 2.0**10, "M": 2.0**20, "G": 2.0**30, "T": 2.0**40}


def _size(text: str) -> float | None:
    """A `free` column: a plain number (-m, -k) or one with a unit (-h: 15Gi, 512Mi, 0B)."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?)i?B?", text)
    return float(m[1]) * _SIZE_UNITS[m[2]] if m else None


def detect_top_or_free(doc: Document) -> bool:
    head = doc.text[:6000]
    return bool(re.search(_TOP_SWAP.pattern, head, re.M)) or bool(re.search(_FREE_HEADER.pattern, head, re.M))


@FORMATS.format("top-free", shapes={"text"}, detect=detect_top_or_free, order=20)
def parse_top_or_free(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """A `host/snapshot` with `mem_percent` (of memory not available), `swap_percent` and, from top, the processes
    with the most resident memory (`top: [{pid, name, memory_percent, cpu_percent}]`)."""
    lines = list(doc.lines())
    data: dict[str, Any] = {"source": "top" if any(_TOP_HEADER.match(x) for x in lines) else "free"}
    total = None
    for i, line in enumerate(lines):
        s = line.strip()
        if m := _TOP_MEM.match(s):
            total = float(m["total"])
        elif (m := _TOP_SWAP.match(s)) and total:
            data["mem_percent"] = round(100 * (1 - float(m["avail"]) / total), 1)
            if float(m["total"]) > 0:
                data["swap_percent"] = round(100 * float(m["used"]) / float(m["total"]), 1)
        elif _FREE_HEADER.match(line) and i + 1 < len(lines):
            mem = lines[i + 1].split()
            if len(mem) >= 7 and mem[0].startswith("Mem") and (t := _size(mem[1])) and (a := _size(mem[6])) is not None:
                data["mem_percent"] = round(100 * (1 - a / t), 1)
            swap = lines[i + 2].split() if i + 2 < len(lines) else []
            if len(swap) >= 3 and swap[0].startswith("Swap") and (t := _size(swap[1])) and (u := _size(swap[2])):
                data["swap_percent"] = round(100 * u / t, 1)
        elif _TOP_HEADER.match(line):
            top = []
            for row in lines[i + 1 :]:
                f = row.split()
                if len(f) < 12 or not f[0].isdigit():
                    break
                try:
                    cpu, mem_pct = float(f[8]), float(f[9])
                except ValueError:
                    break
                top.append({"pid": int(f[0]), "name": " ".join(f[11:]), "cpu_percent": cpu, "memory_percent": mem_pct})
            data["top"] = top
    if "mem_percent" not in data:
        return
    host = PROMPT_HOST.search(doc.text[:400])
    name = host["host"] if host else doc.path
    yield ctx.item(doc.path, "host/snapshot", f"host/{name}", data, None)


# --- `ipmitool sel elist`: the baseboard management controller's event log --------------------------------------

_SEL_ROW = re.compile(
    r"^\s*[0-9a-fA-F]+\s*\|\s*(?P<date>\d\d/\d\d/\d{4})\s*\|\s*(?P<time>\d\d:\d\d:\d\d)\s*\|\s*(?P<sensor>[^|]+?)\s*\|"
    r"\s*(?P<event>[^|]+?)\s*\|\s*(?P<state>Asserted|Deasserted)\s*$"
)
_SEL_HOST = re.compile(r"\s-H\s+(?P<host>[\w.\-]+)")
# events that are a fault of the machine (a power supply, memory, a CPU, a drive, heat), not routine
_SEL_FAULT = re.compile(
    r"Failure detected|AC lost|Redundancy Lost|Insufficient Resources|Uncorrectable|IERR|Machine Check|"
    r"Drive Fault|Predictive Failure|(?<!Non-)Critical going high|Non-recoverable|Power off|power down",
    re.I,
)


def detect_sel(doc: Document) -> bool:
    return sum(1 for line in itertools.islice(doc.lines(), 200) if _SEL_ROW.match(line)) >= 2


@FORMATS.format("ipmi-sel", shapes={"text"}, detect=detect_sel, order=20)
def parse_sel(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """One `log` item per machine (`ipmi/<host>`, the BMC's name without -ipmi/-bmc): each SEL entry a record at its
    time, a fault that was asserted an error."""
    m = _SEL_HOST.search(doc.command or "") or _SEL_HOST.search(doc.text[:2000])
    host = re.sub(r"[-.](?:ipmi|bmc|ilo|idrac|mgmt)\b.*$", "", m["host"]) if m else doc.stem
    records = []
    for n, line in enumerate(doc.lines(), 1):
        row = _SEL_ROW.match(line)
        if not row:
            continue
        month, day, year = row["date"].split("/")
        ts = parse_ts(f"{year}-{month}-{day}T{row['time']}Z")
        fault = row["state"] == "Asserted" and _SEL_FAULT.search(row["event"]) is not None
        records.append({
            "ts": ts,
            "level": "error" if fault else "info",
            "msg": f"{host} ipmi: {row['sensor']} | {row['event']} | {row['state']}",
            "line": n,
        })  # fmt: skip
    if records:
        data = {
            "records": records,
            "source": {"path": doc.path, "export": "ipmi-sel", "host": host},
            "truncated": False,
        }
        last = records[-1]["ts"]
        yield ctx.item(doc.path, "log", f"ipmi/{host}", data, last if isinstance(last, float) else None)


# --- socket states counted from `ss` / `netstat` (`... | awk '{print $1}' | sort | uniq -c`) -------------------

_SOCKET_STATE = re.compile(
    r"^\s*(?P<n>\d+)\s+(?P<state>CLOSE[-_]WAIT|ESTAB(?:LISHED)?|TIME[-_]WAIT|FIN[-_]WAIT[-_]?[12]|SYN[-_]SENT|"
    r"SYN[-_]RECV|LAST[-_]ACK|LISTEN|CLOSING|UNCONN)\s*$"
)
_SOCKET_PEER = re.compile(r"^\s*(?P<n>\d+)\s+(?P<peer>\[?[\w.:\-]+\]?:\d+|\d{1,3}(?:\.\d{1,3}){3})\s*$")
_SOCKET_CMD = re.compile(r"\b(?:ss|netstat)\b")
_STATE_IN_CMD = re.compile(
    r"\bstate\s+(?P<state>[\w-]+)|grep\s+-?\w*\s*['\"]?(?P<grep>CLOSE[-_]WAIT|TIME[-_]WAIT)", re.I
)
_PID_IN_CMD = re.compile(r"pid=(?P<pid>\d+)")


def detect_socket_states(doc: Document) -> bool:
    if not _SOCKET_CMD.search(doc.command or ""):
        return False
    lines = [line for line in doc.lines() if line.strip() and not _PROMPT.match(line.strip())]
    return bool(lines) and all(_SOCKET_STATE.match(x) or _SOCKET_PEER.match(x) for x in lines[:20])


@FORMATS.format("socket-states", shapes={"text"}, detect=detect_socket_states, order=20)
def parse_socket_states(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Counts of a host's TCP sockets by state (`states: {CLOSE-WAIT: 8071, ESTAB: 61}`) or by peer (`peers:
    [{peer, count}]`, with the state the command selected, `state`), and the process the command filtered on."""
    states: dict[str, int] = {}
    peers: list[dict[str, Any]] = []
    for line in doc.lines():
        if m := _SOCKET_STATE.match(line):
            state = m["state"].upper().replace("_", "-")
            state = "ESTAB" if state == "ESTABLISHED" else state
            states[state] = states.get(state, 0) + int(m["n"])
        elif m := _SOCKET_PEER.match(line):
            peers.append({"peer": m["peer"], "count": int(m["n"])})
    if not states and not peers:
        return
    data: dict[str, Any] = {"command": doc.command[:300]}
    if states:
        data["states"] = states
    if peers:
        data["peers"] = peers
        sel = _STATE_IN_CMD.search(doc.command or "")
        if sel:
            data["state"] = (sel["state"] or sel["grep"] or "").upper().replace("_", "-")
    if pid := _PID_IN_CMD.search(doc.command or ""):
        data["pid"] = pid["pid"]
    host = PROMPT_HOST.search(doc.text[:400]) or PROMPT_HOST.search(doc.command or "")
    name = host["host"] if host else doc.path
    yield ctx.item(doc.path, "host/sockets", f"host/{name}", data, None)


# --- HTTP response headers: `curl -sI URL`, `curl -D - URL`, `curl -v` (its "< " lines) ---------------------------
# HTTP/2 200
# cache-control: private, no-store
# cf-cache-status: HIT
_STATUS_LINE = re.compile(r"^(?:< )?(HTTP/[\d.]+) (\d{3})\b")
_HEADER_LINE = re.compile(r"^(?:< )?([A-Za-z][\w\-]*): ?(.*)$")
_CURL_URL = re.compile(r"\bcurl\b.*?\s['\"]?(https?://[^\s'\"|]+)")


# read for what caches did with a response; other header dumps are read as untimed lines (a 5xx named by its URL)
_KNOWN_HEADER = re.compile(
    r"^(?:< )?(?:cache-control|age|x-cache\S*|cf-cache-status|cdn-cache-status|x-served-by|via): ", re.M | re.I
)


def detect_http_headers(doc: Document) -> bool:
    head = doc.text[:20_000]
    status = re.search(r"^(?:< )?HTTP/[\d.]+ \d{3}\b", head, re.M)
    # a session split at its prompts: one curl's headers, maybe grepped down to a few
    fetched = doc.command is not None and _CURL_URL.search(doc.command) is not None
    return bool(status or fetched) and bool(_KNOWN_HEADER.search(head))


@FORMATS.format("http-headers", shapes={"text"}, detect=detect_http_headers, order=22)
def parse_http_headers(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    """Each response's status and headers (names lower-cased), with the URL of the curl command that fetched it. A
    `| grep` of a response's headers, with no status line, is a response too."""
    m0 = _CURL_URL.search(doc.command or "")
    url: str | None = m0.group(1) if m0 else None
    resp: dict[str, Any] | None = None
    out: list[dict[str, Any]] = []
    for n, line in enumerate(doc.lines(), 1):
        if _PROMPT.match(line):
            if resp:
                out.append(resp)
            resp = None
            m = _CURL_URL.search(line)
            url = m.group(1) if m else None
            continue
        if m := _STATUS_LINE.match(line):
            if resp:
                out.append(resp)
            resp = {"url": url, "status": int(m.group(2)), "proto": m.group(1), "headers": {}, "line": n}
            continue
        h = _HEADER_LINE.match(line.rstrip())
        if h and (resp is not None or url is not None):
            if resp is None:  # headers grepped out of a response
                resp = {"url": url, "status": None, "headers": {}, "line": n}
            resp["headers"][h.group(1).lower()] = h.group(2).strip()
    if resp:
        out.append(resp)
    failed = []
    for r in out:
        if not r["headers"]:
            continue
        ts = parse_ts(r["headers"].get("date"))
        yield ctx.item(doc.path, "http/response", f"http {r['url'] or doc.path}", r, ts)
        if (r["status"] or 0) >= 500:
            msg = f"{r.get('proto') or 'HTTP'} {r['status']} from {r['url'] or '?'}"
            failed.append({"ts": ts, "level": "error", "msg": msg, "line": r["line"]})
    if failed:  # a 5xx the response answered is an error line, as the untimed reader would have read it
        data = {"records": failed, "source": {"path": doc.path}, "truncated": False}
        yield ctx.item(doc.path, "log", doc.path, data, None)
