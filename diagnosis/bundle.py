"""Evidence bundles: a folder, a .tar(.gz|.bz2|.xz|.zst) or a .zip of exports, read into an EvidenceSet.

Archives are recognised by their magic bytes, never by name, and read member by member without extracting
to disk. What is refused outright (BundleError) is what makes a bundle unsafe or too big to read: an archive
over the size limits, too many files, a zip bomb (declared sizes, per-entry and overall expansion ratios, and
actual bytes counted while decompressing), and entries escaping the bundle (absolute paths, `..`, links
pointing outside, device files). A single file that cannot be read is only reported: in `errors` when it is
malformed, in `ignored` when it is in no known format; loading goes on.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import json
import logging
import lzma
import os
import posixpath
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from pydantic import BaseModel, ConfigDict, Field

from core.errors import UserError
from diagnosis.evidence import EvidenceSet
from diagnosis.formats import FORMATS, Document, FormatError, NotReadable, ParseContext, describe_unknown, sniff
from diagnosis.formats.base import TERMINAL_PROMPT, terminal_segments, without_bare_prompts
from diagnosis.model import EvidenceItem

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_CHUNK = 1024 * 1024
_GZIP, _BZ2, _XZ, _ZSTD = b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"
_ZIP = (b"PK\x03\x04", b"PK\x05\x06")
_TOOL_FOLDERS = {".git", ".hg", ".svn", "__pycache__"}  # a bundle kept under version control: not evidence
_SKIPPED_NAMES = re.compile(r"(^|/)(__MACOSX/|\._[^/]*$|\.DS_Store$|Thumbs\.db$)")


class BundleError(UserError):
    """The bundle as a whole is refused: unsafe or over the limits. The message says what and how to fix it."""

    code = "invalid_bundle"


class BundleLimits(BaseModel):
    """What a bundle may hold. Ratios are expanded bytes over compressed bytes, checked once an entry (or the
    whole archive) has expanded past `ratio_floor_bytes`: small files of repeated text compress very well and
    are no threat; text exports compress 5-20x, a zip bomb a thousand times or more."""

    model_config = ConfigDict(extra="forbid")

    max_archive_bytes: int = Field(200 * MiB, gt=0)  # the archive file as given
    max_total_bytes: int = Field(1024 * MiB, gt=0)  # all files expanded
    max_files: int = Field(20_000, gt=0)
    max_file_bytes: int = Field(256 * MiB, gt=0)  # one file expanded; over it, the file is reported and skipped
    max_entry_ratio: float = Field(200.0, gt=1)
    max_total_ratio: float = Field(200.0, gt=1)
    ratio_floor_bytes: int = Field(1 * MiB, ge=0)
    max_log_records: int = Field(1_000_000, gt=0)  # per log source; the newest are kept, `truncated` set


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class _FileTooBig(Exception):
    pass


def _too_big(size: int) -> str:
    return f"it is {_human(size)}, over the per-file limit; split it or raise BundleLimits.max_file_bytes"


@dataclass
class _Budget:
    """Counts expanded bytes over the whole bundle, so a bomb is stopped while it expands, not after."""

    limits: BundleLimits
    archive_bytes: int = 0  # 0 for a folder: no ratio to check
    expanded: int = 0
    files: int = 0

    def count_file(self, name: str) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise BundleError(
                f"the bundle holds more than {self.limits.max_files} files (at {name}); "
                "keep the exports an investigation needs, or raise BundleLimits.max_files"
            )

    def add(self, n: int) -> None:
        self.expanded += n
        lim = self.limits
        if self.expanded > lim.max_total_bytes:
            raise BundleError(
                f"the bundle expands past {_human(lim.max_total_bytes)}; "
                "trim it (fewer or shorter logs) or raise BundleLimits.max_total_bytes"
            )
        if (
            self.archive_bytes
            and self.expanded > lim.ratio_floor_bytes
            and self.expanded / self.archive_bytes > lim.max_total_ratio
        ):
            raise BundleError(
                f"the archive expands more than {lim.max_total_ratio:.0f} times its size "
                f"({_human(self.archive_bytes)} -> over {_human(self.expanded)}): refused as a possible zip bomb"
            )


class _CountingReader:
    """A read-only stream over a decompressor that charges every byte to the budget."""

    def __init__(self, inner: IO[bytes], budget: _Budget) -> None:
        self.inner, self.budget = inner, budget

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n if n is not None and n >= 0 else _CHUNK)
        self.budget.add(len(data))
        return data


def _read_bounded(stream: IO[bytes] | _CountingReader, limit: int, compressed: int | None, lim: BundleLimits) -> bytes:
    """Read a whole member, stopping past `limit` bytes or past the entry ratio (a bomb inside an archive)."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            raise _FileTooBig(f"it expands past {_human(limit)}")
        if compressed is not None and total > lim.ratio_floor_bytes and total > compressed * lim.max_entry_ratio:
            raise BundleError(
                f"an entry expands more than {lim.max_entry_ratio:.0f} times its compressed size "
                f"({_human(compressed)} -> over {_human(total)}): refused as a possible zip bomb"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _safe_name(raw: str) -> str:
    """The member's path inside the bundle, or BundleError when it would land outside it."""
    name = raw.replace("\\", "/")
    if "\x00" in name:
        raise BundleError(f"entry {raw!r} has a NUL byte in its name: refused")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise BundleError(f"entry {raw!r} has an absolute path: refused (an archive's entries must be relative)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BundleError(f"entry {raw!r} climbs out of the bundle with '..': refused")
    return "/".join(parts)


def _link_escapes(member: str, target: str, *, relative_to_member: bool) -> bool:
    target = target.replace("\\", "/")
    if target.startswith("/") or re.match(r"^[A-Za-z]:", target):
        return True
    base = posixpath.dirname(member) if relative_to_member else ""
    resolved = posixpath.normpath(posixpath.join(base, target))
    return resolved == ".." or resolved.startswith("../")


@dataclass
class _Loader:
    limits: BundleLimits
    evidence: EvidenceSet = field(default_factory=EvidenceSet)
    ctx: ParseContext = field(default_factory=ParseContext)

    def ignore(self, path: str, reason: str) -> None:
        self.evidence.ignored.append({"path": path, "reason": reason})

    def error(self, path: str, message: str) -> None:
        self.evidence.errors.append({"path": path, "error": message})

    def member(self, path: str, read: Callable[[], bytes]) -> None:
        """One file of the bundle: skip, read (decompressing .gz/.bz2/.xz), sniff, parse; never raises per file."""
        if _SKIPPED_NAMES.search(path):
            self.ignore(path, "operating-system metadata (macOS resource fork or Finder file)")
            return
        try:
            raw = read()
            raw = self.decompress(path, raw)
        except _FileTooBig as exc:
            self.error(path, f"{exc}, over the per-file limit; split it or raise BundleLimits.max_file_bytes")
            return
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            self.error(path, f"truncated or corrupt compressed file: {exc}")
            return
        self.parse(path, raw)

    def decompress(self, path: str, raw: bytes) -> bytes:
        opener = _decompressor(raw[:6])
        if opener is None:
            return raw
        with opener(io.BytesIO(raw)) as stream:
            out = _read_bounded(stream, self.limits.max_file_bytes, len(raw), self.limits)
        if (len(out) > 262 and out[257:262] == b"ustar") or out[:4] in _ZIP:
            raise _Unsupported("an archive inside the bundle: unpack it into the bundle instead")
        return out

    def parse(self, path: str, raw: bytes) -> None:
        try:
            doc = sniff(path, raw)
        except NotReadable as exc:
            (self.ignore if exc.ignored else self.error)(path, str(exc))
            return
        del raw  # the text or parsed JSON is what the parsers read
        segments = terminal_segments(doc.text) if doc.shape == "text" else None
        if segments:
            self.parse_session(path, doc, segments)
            return
        if doc.shape == "text" and not doc.command:  # one command pasted above its output names what printed it
            first = next((line for line in doc.lines() if line.strip()), "")
            prompt = TERMINAL_PROMPT.match(first)
            doc.command = prompt["cmd"] if prompt else ""
            output = without_bare_prompts(doc.text.split(first, 1)[1]).strip() if prompt else ""
            if output[:1] in ("{", "["):  # `aws ... --query ...` printing JSON: read as that JSON
                try:
                    # (a note typed under the JSON is not part of it: the JSON value alone; JSON lines stay whole)
                    end = json.JSONDecoder().raw_decode(output)[1]
                    if output[end:].lstrip()[:1] not in ("{", "["):
                        output = output[:end]
                except json.JSONDecodeError:
                    pass  # a truncated export: sniff says so
                try:
                    printed = sniff(path, output.encode())
                except NotReadable as exc:
                    (self.ignore if exc.ignored else self.error)(path, str(exc))
                    return
                if printed.shape != "text":
                    printed.command, doc = doc.command, printed
        self.parse_document(path, doc)

    def parse_session(self, path: str, doc: Document, segments: list[str]) -> None:
        """A saved terminal session: each command's output is read as a file of its own (a `kubectl get -o json`,
        a `df -h`, a `docker logs`), all under the session's path."""
        read = 0
        for text in segments:
            try:
                part = sniff(path, text.encode())
            except NotReadable as exc:
                if not exc.ignored:
                    self.error(path, str(exc))
                continue
            prompt = next((m for line in text.splitlines() if (m := TERMINAL_PROMPT.match(line))), None)
            part.command = prompt["cmd"] if prompt else ""
            if FORMATS.match(part) is not None:
                read += 1
                self.parse_document(path, part)
        if not read:
            self.ignore(path, describe_unknown(doc))

    def parse_document(self, path: str, doc: Document) -> None:
        fmt = FORMATS.match(doc)
        if fmt is None:
            self.ignore(path, describe_unknown(doc))
            return
        try:
            items = list(fmt.parse(doc, self.ctx))
        except FormatError as exc:
            self.error(path, f"{fmt.name}: {exc}")
            return
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # a shape the format did not expect: report it on this file, keep loading the rest
            log.warning("bundle parse failed", extra={"path": path, "format": fmt.name, "error": repr(exc)})
            self.error(path, f"{fmt.name}: could not read it ({type(exc).__name__}: {exc})")
            return
        self.add(items)

    def add(self, items: list[EvidenceItem]) -> None:
        for item in items:
            self.evidence.add(item)

    def finish(self) -> EvidenceSet:
        for finalise in self.ctx.deferred:
            self.add(list(finalise(self.ctx)))
        for fix_up in self.ctx.after:
            fix_up(self.ctx)
        return self.evidence


class _Unsupported(Exception):
    pass


def load_bundle(
    path: str | os.PathLike[str], limits: BundleLimits | None = None, *, exclude: Collection[str] = ()
) -> EvidenceSet:
    """Read a bundle (folder, tar, tar.gz/bz2/xz, zip or one export file) into evidence items.

    `exclude`: paths inside a folder bundle that are not evidence at all (a corpus scenario's answer file).

    Raises BundleError when the bundle is refused; files it cannot read are in `ignored` and `errors`.
    """
    limits = limits or BundleLimits()
    p = Path(path)
    if not p.exists():
        raise BundleError(f"{p}: no such file or folder; give a folder, a .tar.gz or a .zip of exports")
    loader = _Loader(limits)
    loader.ctx.max_log_records = limits.max_log_records
    if p.is_dir():
        _load_folder(p, loader, frozenset(exclude))
        return loader.finish()
    size = p.stat().st_size
    if size > limits.max_archive_bytes:
        raise BundleError(
            f"{p.name} is {_human(size)}, over the {_human(limits.max_archive_bytes)} limit; "
            "trim the bundle or raise BundleLimits.max_archive_bytes"
        )
    with p.open("rb") as f:
        head = f.read(512)
    if head[:4] in _ZIP:
        _load_zip(p, loader, size)
    elif _is_tar(p, head):
        _load_tar(p, loader, size, head)
    else:  # one export file, perhaps compressed
        budget = _Budget(limits, archive_bytes=size)
        budget.count_file(p.name)
        budget.add(size)

        def read() -> bytes:
            with p.open("rb") as f:
                return _read_bounded(f, limits.max_file_bytes, None, limits)

        _read_member(loader, p.name, read)
    return loader.finish()


def _read_member(loader: _Loader, path: str, read: Callable[[], bytes]) -> None:
    try:
        loader.member(path, read)
    except _Unsupported as exc:
        loader.ignore(path, str(exc))


def _decompressor(head: bytes) -> Callable[[IO[bytes]], IO[bytes]] | None:
    """A reader that decompresses a gzip, bzip2, xz or zstd stream, by its magic bytes; None for anything else."""
    if head.startswith(_GZIP):
        return lambda f: cast(IO[bytes], gzip.GzipFile(fileobj=f))
    if head.startswith(_BZ2):
        return lambda f: cast(IO[bytes], bz2.BZ2File(f))
    if head.startswith(_XZ):
        return lambda f: cast(IO[bytes], lzma.LZMAFile(f))
    if head.startswith(_ZSTD):
        return _zstd_reader
    return None


def _zstd_reader(f: IO[bytes]) -> IO[bytes]:
    """zstd (`zstd`, logrotate's zstd compression, journald exports): a stream reader, so frames written without
    their content size (streamed compression) decompress too, bounded by the caller's read loop."""
    import zstandard  # only for the bundles that hold .zst files

    return cast(IO[bytes], _ZstdStream(zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)))


class _ZstdStream(io.RawIOBase):
    """zstandard's reader, raising OSError (as gzip, bz2 and lzma do) for a corrupt or truncated stream."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        import zstandard

        try:
            data: bytes = self.inner.read(n)
        except zstandard.ZstdError as exc:
            raise OSError(f"zstd: {exc}") from None
        return data

    def close(self) -> None:
        self.inner.close()
        super().close()


def _is_tar(p: Path, head: bytes) -> bool:
    """A tar (plain or compressed): the ustar magic at offset 257 of the (decompressed) stream."""
    if head[257:262] == b"ustar":
        return True
    opener = _decompressor(head)
    if opener is None:
        return False
    try:
        with p.open("rb") as f, opener(f) as stream:
            block = stream.read(512)
    except (OSError, EOFError, zlib.error, lzma.LZMAError):
        return False
    return block[257:262] == b"ustar"


def _load_tar(p: Path, loader: _Loader, size: int, head: bytes) -> None:
    limits = loader.limits
    budget = _Budget(limits, archive_bytes=size)
    opener = _decompressor(head)
    with p.open("rb") as raw:
        # decompress here, not in tarfile, so every expanded byte (headers included) is counted as it comes
        stream: IO[bytes] = opener(raw) if opener else raw
        counted = _CountingReader(stream, budget)
        try:
            tar = tarfile.open(fileobj=counted, mode="r|")  # type: ignore[call-overload]  # noqa: SIM115
        except tarfile.TarError as exc:
            raise BundleError(f"{p.name}: not a readable tar archive ({exc})") from exc
        with contextlib.closing(stream), tar:
            try:
                for member in tar:
                    _tar_member(tar, member, loader, budget)
            except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
                raise BundleError(f"{p.name}: the archive is truncated or corrupt ({exc}); export it again") from exc


def _tar_member(tar: tarfile.TarFile, m: tarfile.TarInfo, loader: _Loader, budget: _Budget) -> None:
    limits = loader.limits
    name = _safe_name(m.name)
    if m.isdir():
        return
    if m.issym() or m.islnk():
        # a symlink's target is relative to its folder; a hard link's to the archive root
        if _link_escapes(name, m.linkname, relative_to_member=m.issym()):
            raise BundleError(f"entry {m.name!r} links outside the bundle (to {m.linkname!r}): refused")
        loader.ignore(name, f"link to {m.linkname}: its target is read in its own right")
        return
    if m.ischr() or m.isblk() or m.isfifo() or m.isdev():
        raise BundleError(f"entry {m.name!r} is a device or FIFO, not a file: refused")
    if m.issparse():
        raise BundleError(f"entry {m.name!r} is a sparse file: refused (bundles hold plain files)")
    if not m.isreg():
        raise BundleError(f"entry {m.name!r} has tar type {m.type!r}, not a plain file: refused")
    budget.count_file(name)
    if m.size > limits.max_total_bytes:
        raise BundleError(f"entry {m.name!r} declares {_human(m.size)}, past the bundle's expanded-size limit")
    if m.size > limits.max_file_bytes:
        loader.error(name, _too_big(m.size))
        return  # tarfile skips its bytes (counted by the budget) on the next member

    def read() -> bytes:
        f = tar.extractfile(m)
        return _read_bounded(f, limits.max_file_bytes, None, limits) if f else b""

    _read_member(loader, name, read)


def _load_zip(p: Path, loader: _Loader, size: int) -> None:
    limits = loader.limits
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BundleError(f"{p.name}: not a readable zip archive ({exc}); export it again") from exc
    with zf:
        infos = zf.infolist()
        files = [i for i in infos if not i.is_dir()]
        if len(files) > limits.max_files:
            raise BundleError(
                f"{p.name} holds {len(files)} files, over the {limits.max_files} limit; "
                "keep the exports an investigation needs, or raise BundleLimits.max_files"
            )
        declared = sum(i.file_size for i in files)
        if declared > limits.max_total_bytes:
            raise BundleError(
                f"{p.name} declares {_human(declared)} expanded, over the {_human(limits.max_total_bytes)} limit; "
                "trim it or raise BundleLimits.max_total_bytes"
            )
        if declared > limits.ratio_floor_bytes and declared / max(size, 1) > limits.max_total_ratio:
            raise BundleError(
                f"{p.name} declares {_human(declared)} from {_human(size)}, more than {limits.max_total_ratio:.0f} "
                "times its size: refused as a possible zip bomb"
            )
        names = []
        for info in files:  # check every entry before reading any: a bad archive is refused whole
            name = _safe_name(info.filename)
            mode = info.external_attr >> 16
            expands = info.file_size / max(info.compress_size, 1)
            if info.file_size > limits.ratio_floor_bytes and expands > limits.max_entry_ratio:
                raise BundleError(
                    f"entry {info.filename!r} declares {_human(info.file_size)} from {_human(info.compress_size)}: "
                    "refused as a possible zip bomb"
                )
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                raise BundleError(f"entry {info.filename!r} is a device, FIFO or socket, not a file: refused")
            if stat.S_ISLNK(mode):
                target = zf.read(info)[:4096].decode("utf-8", errors="replace")
                if _link_escapes(name, target, relative_to_member=True):
                    raise BundleError(f"entry {info.filename!r} links outside the bundle (to {target!r}): refused")
            names.append((info, name, stat.S_ISLNK(mode)))
        budget = _Budget(limits, archive_bytes=size)
        for info, name, is_link in names:
            budget.count_file(name)
            if is_link:
                loader.ignore(name, "symbolic link: its target is read in its own right")
                continue
            if info.file_size > limits.max_file_bytes:
                loader.error(name, _too_big(info.file_size))
                continue

            def read(info: zipfile.ZipInfo = info) -> bytes:
                try:
                    with zf.open(info) as f:
                        # count actual bytes too: a lying header is caught here (and by zipfile's CRC check)
                        counted = _CountingReader(f, budget)
                        return _read_bounded(counted, limits.max_file_bytes, info.compress_size, limits)
                except zipfile.BadZipFile as exc:
                    raise OSError(f"corrupt zip entry: {exc}") from exc

            _read_member(loader, name, read)


def _load_folder(root: Path, loader: _Loader, exclude: frozenset[str] = frozenset()) -> None:
    limits = loader.limits
    budget = _Budget(limits)
    real_root = os.path.realpath(root)
    for rel, full in _walk(root):
        if rel in exclude:
            continue
        try:
            st = os.lstat(full)
        except OSError as exc:
            loader.error(rel, f"cannot be read: {exc.strerror}")
            continue
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(full)
            if os.path.commonpath([real_root, target]) != real_root:
                loader.error(rel, "symbolic link to a file outside the bundle folder: not followed")
            else:
                loader.ignore(rel, "symbolic link inside the bundle: its target is read in its own right")
            continue
        if not stat.S_ISREG(st.st_mode):
            loader.error(rel, "not a regular file (device, FIFO or socket): not read")
            continue
        budget.count_file(rel)
        if st.st_size > limits.max_file_bytes:
            loader.error(rel, _too_big(st.st_size))
            continue
        budget.add(st.st_size)

        def read(full: str = full) -> bytes:
            # O_NOFOLLOW: the file was checked above; a link swapped in since is not followed
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                return _read_bounded(f, limits.max_file_bytes, None, limits)

        _read_member(loader, rel, read)


def _walk(root: Path) -> Iterator[tuple[str, str]]:
    """(relative path, full path) of every entry below root, in a stable order; linked folders are not entered."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _TOOL_FOLDERS)
        rel_dir = os.path.relpath(dirpath, root)
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(filenames + links):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            yield rel, os.path.join(dirpath, name)
