"""OCI archives without a registry: the layout `ctr images import` reads, digests that match, reproducible."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from e2e.realnode.image import Entry, directory, write_archive


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def test_archive_layout_digests_and_content(tmp_path: Path) -> None:
    entries = [
        directory("/tmp", 0o1777),
        Entry(path="/usr/local/bin/tool", mode=0o755, data=b"\x7fELF..."),
        Entry(path="/bin/sh", mode=0o777, link="busybox"),
    ]
    out = tmp_path / "a.tar"
    digest = write_archive(
        name="tessera.dev/e2e/x:v1", entries=entries, entrypoint=["/usr/local/bin/tool"], out=out
    )
    files = read_archive(out)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    [descriptor] = json.loads(files["index.json"])["manifests"]
    assert descriptor["digest"] == digest
    assert descriptor["annotations"]["io.containerd.image.name"] == "tessera.dev/e2e/x:v1"
    manifest = json.loads(blob(files, digest))
    config = json.loads(blob(files, manifest["config"]["digest"]))
    layer = blob(files, manifest["layers"][0]["digest"])
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]  # uncompressed: diff ID = digest
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/tool"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    # parents made, modes and links kept
    assert {"usr", "usr/local", "usr/local/bin", "bin"} <= set(members)
    assert members["tmp"].mode == 0o1777 and members["usr/local/bin/tool"].mode == 0o755
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"


def test_reproducible(tmp_path: Path) -> None:
    entries = [Entry(path="/a", mode=0o644, data=b"a")]
    first = write_archive(name="x:v1", entries=entries, entrypoint=["/a"], out=tmp_path / "1.tar")
    second = write_archive(name="x:v1", entries=entries, entrypoint=["/a"], out=tmp_path / "2.tar")
    assert first == second
    assert (tmp_path / "1.tar").read_bytes() == (tmp_path / "2.tar").read_bytes()
