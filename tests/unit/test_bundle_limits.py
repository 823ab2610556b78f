"""Bundle archives and limits: tar/zip recognised by magic bytes; escaping entries, bombs, oversized and
crowded bundles refused with a BundleError that says what and how to fix it."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from core.errors import UserError
from diagnosis.bundle import BundleError, BundleLimits, load_bundle

DATA = Path(__file__).resolve().parent.parent / "data" / "formats"
MiB = 1024 * 1024


def summary(ev) -> tuple[list[tuple[str, str, str]], list, list]:  # type: ignore[no-untyped-def]
    return sorted((i.kind, i.object, i.id) for i in ev), ev.ignored, ev.errors


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in attrs.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data))


def add_link(tar: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tar.addfile(info)


def make_tar(path: Path, mode: str, build) -> Path:  # type: ignore[no-untyped-def]
    with tarfile.open(path, mode) as tar:
        build(tar)
    return path


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz", "w"])
def test_tar_archives_load_like_the_folder_whatever_their_name(tmp_path: Path, mode: str) -> None:
    archive = tmp_path / "evidence.bin"  # recognised by magic bytes, not by name
    make_tar(archive, mode, lambda t: t.add(DATA, arcname="."))
    assert summary(load_bundle(archive)) == summary(load_bundle(DATA))


def test_zip_archive_loads_like_the_folder(tmp_path: Path) -> None:
    archive = tmp_path / "evidence.tgz"  # a misleading name changes nothing
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(DATA.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(DATA).as_posix())
        zf.writestr("__MACOSX/._pods.json", b"\x00\x05\x16\x07")
    ids, ignored, errors = summary(load_bundle(archive))
    want_ids, want_ignored, want_errors = summary(load_bundle(DATA))
    assert ids == want_ids and errors == want_errors
    assert ignored[:-1] == want_ignored and ignored[-1]["path"] == "__MACOSX/._pods.json"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../evil.json", "climbs out of the bundle"),
        ("a/../../evil.json", "climbs out"),
        ("/etc/evil.json", "absolute path"),
    ],
)
def test_escaping_tar_entries_are_refused(tmp_path: Path, name: str, says: str) -> None:
    archive = make_tar(tmp_path / "b.tar.gz", "w:gz", lambda t: add_bytes(t, name, b"{}"))
    with pytest.raises(BundleError, match=says):
        load_bundle(archive)


@pytest.mark.parametrize("name", ["../evil.json", "/abs/evil.json", "..\\evil.json", "C:/evil.json"])
def test_escaping_zip_entries_are_refused_before_anything_is_read(tmp_path: Path, name: str) -> None:
    archive = tmp_path / "b.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(DATA / "rds-events.json", "fine.json")
        zf.writestr(name, b"{}")
    with pytest.raises(BundleError, match="refused"):
        load_bundle(archive)


@pytest.mark.parametrize(
    ("target", "kind"),
    [
        ("../../etc/passwd", tarfile.SYMTYPE),
        ("/etc/passwd", tarfile.SYMTYPE),
        ("../outside", tarfile.LNKTYPE),
    ],
)
def test_links_pointing_outside_are_refused(tmp_path: Path, target: str, kind: bytes) -> None:
    archive = make_tar(tmp_path / "b.tgz", "w:gz", lambda t: add_link(t, "logs/link.log", target, kind))
    with pytest.raises(BundleError, match="links outside the bundle"):
        load_bundle(archive)


def test_links_inside_are_not_read_twice(tmp_path: Path) -> None:
    def build(t: tarfile.TarFile) -> None:
        t.add(DATA / "rds-events.json", arcname="b/events.json")
        add_link(t, "b/latest.json", "events.json")

    ev = load_bundle(make_tar(tmp_path / "b.tgz", "w:gz", build))
    assert len(ev.kind("rds/event")) == 2
    assert ev.ignored == [
        {"path": "b/latest.json", "reason": "link to events.json: its target is read in its own right"}
    ]


def test_device_files_are_refused(tmp_path: Path) -> None:
    def build(t: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("dev/sda")
        info.type = tarfile.BLKTYPE
        t.addfile(info)

    with pytest.raises(BundleError, match="device or FIFO"):
        load_bundle(make_tar(tmp_path / "b.tar", "w", build))


def test_zip_symlink_pointing_outside_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "b.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("logs/app.log")
        info.external_attr = (0o120777) << 16  # S_IFLNK: the content is the target
        zf.writestr(info, "../../../../etc/shadow")
    with pytest.raises(BundleError, match="links outside the bundle"):
        load_bundle(archive)


def test_folder_symlinks_out_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "pods.json").write_text((DATA / "data.txt").read_text())
    root = tmp_path / "bundle"
    root.mkdir()
    shutil.copy(DATA / "rds-events.json", root / "events.json")
    os.symlink(outside / "pods.json", root / "pods.json")
    os.symlink(outside, root / "more")
    os.symlink(root / "events.json", root / "again.json")
    ev = load_bundle(root)
    assert ev.kinds() == {"rds/event"}  # nothing from outside, and the inner link not read twice
    assert ev.errors == [
        {"path": "more", "error": "symbolic link to a file outside the bundle folder: not followed"},
        {"path": "pods.json", "error": "symbolic link to a file outside the bundle folder: not followed"},
    ]
    assert [i["path"] for i in ev.ignored] == ["again.json"]


def test_oversized_archive_is_refused(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "b.tgz", "w:gz", lambda t: t.add(DATA, arcname="."))
    with pytest.raises(
        BundleError, match=r"over the .* limit; trim the bundle or raise BundleLimits.max_archive_bytes"
    ):
        load_bundle(archive, BundleLimits(max_archive_bytes=1024))


def test_zip_bomb_refused_by_its_declared_sizes(tmp_path: Path) -> None:
    archive = tmp_path / "b.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.log", b"\x00" * (64 * MiB))  # deflates about 1000 to 1
    with pytest.raises(BundleError, match="possible zip bomb"):
        load_bundle(archive)


def test_zip_bomb_with_a_lying_header_is_stopped_while_expanding(tmp_path: Path) -> None:
    archive = tmp_path / "b.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.log", b"0" * (16 * MiB))
    data = bytearray(archive.read_bytes())
    # rewrite the declared size (local header offset 22, central directory +24) to 1 KiB: the reader must not
    # trust it; zipfile stops at the declared size and fails its CRC, which is a corrupt file, not a silent pass
    info = zipfile.ZipFile(archive).infolist()[0]
    data[22:26] = (1024).to_bytes(4, "little")
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 24 : cd + 28] = (1024).to_bytes(4, "little")
    archive.write_bytes(bytes(data))
    assert info.file_size == 16 * MiB
    ev = load_bundle(archive)
    assert ev.kinds() == set() and ev.errors and ev.errors[0]["path"] == "zeros.log"


def test_tar_gz_bomb_is_stopped_while_expanding(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "b.tgz", "w:gz", lambda t: add_bytes(t, "zeros.log", b"\x00" * (64 * MiB)))
    assert archive.stat().st_size < MiB
    with pytest.raises(BundleError, match="expands more than 200 times its size"):
        load_bundle(archive)


def test_gz_bomb_inside_a_folder_is_refused(tmp_path: Path) -> None:
    import gzip

    (tmp_path / "big.log.gz").write_bytes(gzip.compress(b"\x00" * (64 * MiB)))
    with pytest.raises(BundleError, match="expands more than 200 times its compressed size"):
        load_bundle(tmp_path)


def test_expanded_size_limit(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "b.tgz", "w:gz", lambda t: t.add(DATA, arcname="."))
    with pytest.raises(BundleError, match=r"raise BundleLimits\.max_total_bytes"):
        load_bundle(archive, BundleLimits(max_total_bytes=20_000))
    with pytest.raises(BundleError, match=r"raise BundleLimits\.max_total_bytes"):
        load_bundle(DATA, BundleLimits(max_total_bytes=20_000))


@pytest.mark.parametrize("form", ["folder", "tar", "zip"])
def test_too_many_files_are_refused(tmp_path: Path, form: str) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for n in range(12):
        (root / f"{n}.log").write_text(f"2024-06-12T14:00:0{n % 10}Z INFO line {n}\n")
    path = root
    if form == "tar":
        path = make_tar(tmp_path / "b.tar.gz", "w:gz", lambda t: t.add(root, arcname="."))
    elif form == "zip":
        path = tmp_path / "b.zip"
        with zipfile.ZipFile(path, "w") as zf:
            for p in sorted(root.iterdir()):
                zf.write(p, p.name)
    with pytest.raises(BundleError, match=r"more than 10 files|12 files, over the 10 limit"):
        load_bundle(path, BundleLimits(max_files=10))
    assert len(load_bundle(path, BundleLimits(max_files=12)).kind("log")) == 12


def test_a_file_over_the_per_file_limit_is_reported_and_the_rest_loads(tmp_path: Path) -> None:
    (tmp_path / "big.log").write_text("2024-06-12T14:00:00Z ERROR x\n" * 2000)
    shutil.copy(DATA / "rds-events.json", tmp_path / "events.json")
    ev = load_bundle(tmp_path, BundleLimits(max_file_bytes=10_000))
    assert ev.kinds() == {"rds/event"}
    assert ev.errors[0]["path"] == "big.log" and "per-file limit" in ev.errors[0]["error"]


def test_log_records_are_capped_keeping_the_newest(tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text("".join(f"2024-06-12T14:00:{n:02d}Z INFO n={n}\n" for n in range(50)))
    log = load_bundle(tmp_path, BundleLimits(max_log_records=10)).kind("log")[0].data
    assert log["truncated"] is True and [r["line"] for r in log["records"]] == list(range(41, 51))


def test_missing_path_and_corrupt_archive(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no such file or folder"):
        load_bundle(tmp_path / "nope.tgz")
    archive = make_tar(tmp_path / "b.tgz", "w:gz", lambda t: t.add(DATA, arcname="."))
    (tmp_path / "cut.tgz").write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(BundleError, match="truncated or corrupt"):
        load_bundle(tmp_path / "cut.tgz")


def test_bundle_error_is_a_user_error_with_a_code() -> None:
    assert issubclass(BundleError, UserError) and BundleError.code == "invalid_bundle"
