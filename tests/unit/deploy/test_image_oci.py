"""deploy/image/oci.py: the OCI layout `ctr images import` reads, layers in order, digests that match their
blobs, layers given as tar files, reproducible bytes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from deploy.image import oci


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        files = {}
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                files[m.name] = f.read()
        return files


def blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def members(layer: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        return {m.name: m for m in tar.getmembers()}


def two_layer_archive(tmp_path: Path) -> tuple[oci.Written, Path, bytes, bytes]:
    bottom = oci.layer_tar([oci.Entry(path="/etc/os-release", mode=0o644, data=b"ID=debian\n")], mtime=5)
    base = tmp_path / "base.tar"
    tmp_path.mkdir(parents=True, exist_ok=True)
    base.write_bytes(bottom)  # the bottom layer as a file, as mmdebstrap's root file system is
    top = oci.layer_tar([oci.Entry(path="/usr/local/bin/tool", mode=0o755, data=b"#!/bin/sh\n")], mtime=5)
    out = tmp_path / "image.oci.tar"
    written = oci.write_archive(
        name="tessera.dev/x:1.2.3",
        layers=[base, top],
        config={"Entrypoint": ["tool"], "Cmd": ["run"], "User": "0:0"},
        history=[{"created_by": "base"}, {"created_by": "top"}],
        created="2025-05-20T00:00:00Z",
        out=out,
        mtime=5,
    )
    return written, out, bottom, top


def test_archive_round_trip_layers_in_order_digests_match(tmp_path: Path) -> None:
    written, out, bottom, top = two_layer_archive(tmp_path)
    files = read_archive(out)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["mediaType"] == oci.INDEX
    [descriptor] = index["manifests"]
    assert descriptor["digest"] == written.digest
    assert descriptor["annotations"] == {
        "io.containerd.image.name": "tessera.dev/x:1.2.3",
        "org.opencontainers.image.ref.name": "1.2.3",
    }
    manifest_blob = blob(files, written.digest)
    assert descriptor["size"] == len(manifest_blob)
    manifest = json.loads(manifest_blob)
    assert manifest["mediaType"] == oci.MANIFEST and manifest["config"]["mediaType"] == oci.CONFIG
    # bottom first, as given; uncompressed, so each diff ID is the layer's digest
    layers = [blob(files, d["digest"]) for d in manifest["layers"]]
    assert layers == [bottom, top]
    assert [d["size"] for d in manifest["layers"]] == [len(bottom), len(top)]
    assert {d["mediaType"] for d in manifest["layers"]} == {oci.LAYER}
    config = json.loads(blob(files, manifest["config"]["digest"]))
    assert config["rootfs"] == {"type": "layers", "diff_ids": [d["digest"] for d in manifest["layers"]]}
    assert config["config"] == {"Entrypoint": ["tool"], "Cmd": ["run"], "User": "0:0"}
    assert config["history"] == [{"created_by": "base"}, {"created_by": "top"}]
    assert config["created"] == "2025-05-20T00:00:00Z"
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert written.layers_size == len(bottom) + len(top)
    # nothing but the layout: two layers, the config, the manifest
    assert sorted(files) == sorted(
        ["oci-layout", "index.json"]
        + [f"blobs/sha256/{d[7:]}" for d in (*config["rootfs"]["diff_ids"], manifest["config"]["digest"])]
        + [f"blobs/sha256/{written.digest[7:]}"]
    )


def test_a_layer_file_and_its_bytes_make_the_same_image(tmp_path: Path) -> None:
    layer = oci.layer_tar([oci.Entry(path="/a", mode=0o644, data=b"a")])
    (tmp_path / "layer.tar").write_bytes(layer)
    common = {"name": "x:1", "config": {}, "history": []}
    from_file = oci.write_archive(**common, layers=[tmp_path / "layer.tar"], out=tmp_path / "1.tar")  # type: ignore[arg-type]
    from_bytes = oci.write_archive(**common, layers=[layer], out=tmp_path / "2.tar")  # type: ignore[arg-type]
    assert from_file == from_bytes
    assert (tmp_path / "1.tar").read_bytes() == (tmp_path / "2.tar").read_bytes()


def test_reproducible_and_sensitive_to_content(tmp_path: Path) -> None:
    first, out1, _, _ = two_layer_archive(tmp_path / "1")
    second, out2, _, _ = two_layer_archive(tmp_path / "2")
    assert first == second and out1.read_bytes() == out2.read_bytes()
    other = oci.write_archive(
        name="tessera.dev/x:1.2.3",
        layers=[oci.layer_tar([oci.Entry(path="/a", mode=0o644, data=b"b")])],
        config={},
        history=[],
        out=tmp_path / "3.tar",
    )
    assert other.digest != first.digest


def test_tree_entries_normalise_modes_and_keep_links(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "opt" / "site" / "pkg").mkdir(parents=True)
    script = root / "opt" / "site" / "tool"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o700)  # anyone's execute bit makes 0755
    module = root / "opt" / "site" / "pkg" / "m.py"
    module.write_text("x = 1\n")
    module.chmod(0o600)
    (root / "opt" / "site" / "pkg").chmod(0o700)
    os.symlink("pkg/m.py", root / "opt" / "site" / "link")
    entries = {e.path: e for e in oci.tree_entries(root, "/")}
    assert sorted(entries) == [
        "/opt",
        "/opt/site",
        "/opt/site/link",
        "/opt/site/pkg",
        "/opt/site/pkg/m.py",
        "/opt/site/tool",
    ]
    assert entries["/opt/site/tool"].mode == 0o755 and entries["/opt/site/pkg/m.py"].mode == 0o644
    assert entries["/opt/site/pkg"].mode == 0o755
    assert entries["/opt/site/link"].link == "pkg/m.py"
    written = tmp_path / "layer.tar"
    oci.write_layer(list(entries.values()), written, mtime=1747699200)
    layer = written.read_bytes()
    assert layer == oci.layer_tar(list(entries.values()), mtime=1747699200)  # streamed = in memory
    found = members(layer)
    assert list(found) == sorted(found)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in found.values()} == {(0, 0, "", "", 1747699200)}
    with tarfile.open(written) as tar:
        extracted = tar.extractfile("opt/site/pkg/m.py")
        assert extracted is not None and extracted.read() == b"x = 1\n"


def test_tree_entries_refuse_special_files(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="fifo"):
        oci.tree_entries(tmp_path)


def test_read_index_and_copy_blob(tmp_path: Path) -> None:
    written, out, bottom, _ = two_layer_archive(tmp_path)
    manifests = oci.read_index(out)["manifests"]
    assert isinstance(manifests, list)
    [descriptor] = manifests
    assert descriptor["digest"] == written.digest
    copied = tmp_path / "copied"
    oci.copy_blob(out, oci.digest(bottom), copied)
    assert copied.read_bytes() == bottom
