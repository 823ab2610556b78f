"""CPU profiles as their tools print them, read as where a process spends its CPU: one `runtime/cpu_profile` item
`{tool, samples, frames: [{name, share, callers}]}` (frames by self share, largest first; `share` 0-1 of all
samples; `callers`, from a bottom-up profile, the first frames that called it), object `profile/<host or file>`.

- `node --prof-process` (V8 tick profile): the `[JavaScript]`, `[C++]`, `[Shared libraries]` tables
  (`ticks total nonlib name`) and the `[Bottom up (heavy) profile]` for the callers of the heaviest entries.
- `go tool pprof -top` (`flat flat% sum% cum cum%`).
- `perf report --stdio` (`Overhead Command Shared Object Symbol`).
- `py-spy top`/`dump` are not profiles of this kind and are not read here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from diagnosis.formats.base import FORMATS, Document, ParseContext, prompt_host
from diagnosis.model import EvidenceItem

_NODE_HEAD = re.compile(r"^Statistical profiling result from .*\((?P<ticks>\d+) ticks", re.M)
_NODE_SECTION = re.compile(r"^ \[(?P<name>[A-Za-z+ ()]+)\]:\s*$")
_NODE_ROW = re.compile(r"^\s*(?P<ticks>\d+)\s+(?P<total>[\d.]+)%\s+(?:[\d.]+%\s+)?(?P<name>\S.*?)\s*$")
_PPROF_HEAD = re.compile(r"^\s*flat\s+flat%\s+sum%\s+cum\s+cum%\s*$", re.M)
_PPROF_ROW = re.compile(r"^\s*[\d.]+\w*\s+(?P<flat>[\d.]+)%\s+[\d.]+%\s+[\d.]+\w*\s+[\d.]+%\s+(?P<name>\S.*?)\s*$")
_PERF_HEAD = re.compile(r"^#\s*Overhead\s+Command\s+Shared Object\s+Symbol", re.M)
_PERF_ROW = re.compile(r"^\s*(?P<share>[\d.]+)%\s+(?P<comm>\S+)\s+(?P<dso>\S+)\s+\[[.k]\]\s+(?P<name>\S.*?)\s*$")
# node's table sections whose entries are frames; Summary and the bottom-up profile are not
_NODE_FRAMES = {"JavaScript", "C++", "Shared libraries", "C++ entry points"}


def detect(doc: Document) -> bool:
    head = doc.text[:20000]
    return bool(_NODE_HEAD.search(head) or _PPROF_HEAD.search(head) or _PERF_HEAD.search(head))


def _node(doc: Document) -> tuple[int, list[dict]]:
    m = _NODE_HEAD.search(doc.text)
    total = int(m["ticks"]) if m else 0
    frames: dict[str, dict] = {}
    section, heavy, current = "", False, None
    for line in doc.lines():
        sec = _NODE_SECTION.match(line)
        if sec:
            section = sec["name"].strip()
            heavy = section.startswith("Bottom up")
            continue
        row = _NODE_ROW.match(line)
        if not row or row["name"] in ("name", "parent  name"):
            continue
        if section in _NODE_FRAMES:
            share = float(row["total"]) / 100.0
            frames.setdefault(row["name"], {"name": row["name"], "share": share, "callers": []})
        elif heavy:
            # bottom up: an unindented-ish entry, then its callers indented two more spaces each
            indent = len(line) - len(line.lstrip())
            name = re.sub(r"^\s*\d+\s+[\d.]+%\s+", "", line).strip()
            if name in frames and indent <= 4:
                current = frames[name]
            elif current is not None and len(current["callers"]) < 3 and name:
                current["callers"].append(name)
    return total, list(frames.values())


def _pprof(doc: Document) -> list[dict]:
    return [
        {"name": m["name"], "share": float(m["flat"]) / 100.0, "callers": []}
        for line in doc.lines()
        if (m := _PPROF_ROW.match(line))
    ]


def _perf(doc: Document) -> list[dict]:
    return [
        {"name": m["name"], "share": float(m["share"]) / 100.0, "callers": [], "command": m["comm"], "dso": m["dso"]}
        for line in doc.lines()
        if not line.startswith("#") and (m := _PERF_ROW.match(line))
    ]


@FORMATS.format("cpu-profile", shapes={"text"}, detect=detect, order=17)
def parse(doc: Document, ctx: ParseContext) -> Iterator[EvidenceItem]:
    head = doc.text[:20000]
    if _NODE_HEAD.search(head):
        tool = "node --prof-process"
        samples, frames = _node(doc)
    elif _PPROF_HEAD.search(head):
        tool, samples, frames = "go tool pprof", 0, _pprof(doc)
    else:
        tool, samples, frames = "perf report", 0, _perf(doc)
    if not frames:
        return
    frames.sort(key=lambda f: -f["share"])
    name = prompt_host(doc.text) or doc.path
    data = {"tool": tool, "samples": samples, "frames": frames[:50], "command": doc.command or ""}
    yield ctx.item(doc.path, "runtime/cpu_profile", f"profile/{name}", data)
