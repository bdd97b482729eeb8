"""OCI image archives without a registry or a container engine (standard library only).

An archive is the OCI image layout (oci-layout, index.json, blobs/sha256/*) in one tar, as
`ctr images import` reads it; the index's `io.containerd.image.name` annotation names the image. Layers are
uncompressed tars, each either built here from entries (`Entry`) or an existing tar file given by path (a
root file system from mmdebstrap, say). Everything is reproducible: entries in sorted order, fixed times,
owner 0:0, normalised modes, JSON with sorted keys.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
INDEX = "application/vnd.oci.image.index.v1+json"
NAME_ANNOTATION = "io.containerd.image.name"
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Entry:
    """One path of a layer: a directory, a file (its bytes, or a host file read when written) or a symlink."""

    path: str  # absolute, inside the image
    mode: int
    data: bytes | None = None
    link: str | None = None
    source: Path | None = None  # a host file whose bytes the entry has, read only while the layer is written


def directory(path: str, mode: int = 0o755) -> Entry:
    return Entry(path=path, mode=mode)


def file_from(host: Path, path: str, mode: int = 0o755) -> Entry:
    return Entry(path=path, mode=mode, data=host.read_bytes())


def parents(entries: Iterable[Entry]) -> list[Entry]:
    """The directories every entry needs, once each."""
    needed: set[str] = set()
    for e in entries:
        parts = e.path.strip("/").split("/")[:-1]
        needed.update("/" + "/".join(parts[: i + 1]) for i in range(len(parts)))
    return [directory(p) for p in sorted(needed)]


def tree_entries(root: Path, under: str = "/") -> list[Entry]:
    """Every path below `root` as an entry below `under`, modes normalised (0755 when anyone may execute or
    for a directory, else 0644) so the layer does not depend on the umask or on how the files were made."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in [*dirnames, *sorted(filenames)]:
            host = base / name
            inside = "/" + "/".join(p for p in (under.strip("/"), host.relative_to(root).as_posix()) if p)
            st = host.lstat()
            if stat.S_ISLNK(st.st_mode):
                entries.append(Entry(path=inside, mode=0o777, link=os.readlink(host)))
            elif stat.S_ISDIR(st.st_mode):
                entries.append(directory(inside))
            elif stat.S_ISREG(st.st_mode):
                mode = 0o755 if st.st_mode & 0o111 else 0o644
                entries.append(Entry(path=inside, mode=mode, source=host))
            else:
                raise ValueError(f"{host}: neither a file, a directory nor a symbolic link")
    return entries


def _with_parents(entries: Sequence[Entry]) -> list[Entry]:
    explicit = {e.path for e in entries}
    everything = [d for d in parents(entries) if d.path not in explicit] + list(entries)
    return sorted(everything, key=lambda x: x.path)


def _write_tar(fileobj: BinaryIO, entries: Sequence[Entry], mtime: int) -> None:
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in _with_parents(entries):
            info = tarfile.TarInfo(e.path.lstrip("/"))
            info.mode, info.mtime, info.uid, info.gid = e.mode, mtime, 0, 0
            if e.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, e.link
                tar.addfile(info)
            elif e.data is not None:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            elif e.source is not None:
                with e.source.open("rb") as f:
                    info.size = os.fstat(f.fileno()).st_size
                    tar.addfile(info, f)
            else:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)


def layer_tar(entries: Sequence[Entry], mtime: int = 0) -> bytes:
    """The layer as bytes: the entries and the directories they need, sorted."""
    buffer = io.BytesIO()
    _write_tar(buffer, entries, mtime)
    return buffer.getvalue()


def write_layer(entries: Sequence[Entry], out: Path, mtime: int = 0) -> None:
    """The layer as a tar file (for layers too large to hold in memory)."""
    with out.open("wb") as f:
        _write_tar(f, entries, mtime)


Layer = bytes | Path  # the tar's bytes, or a tar file


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Written:
    """What write_archive wrote: the manifest digest (the image's identity) and the layers' total size."""

    digest: str
    layers_size: int


def _layer_facts(layer: Layer) -> tuple[str, int]:
    if isinstance(layer, bytes):
        return digest(layer), len(layer)
    return file_digest(layer), layer.stat().st_size


def write_archive(
    *,
    name: str,
    layers: Sequence[Layer],
    config: Mapping[str, object],
    history: Sequence[Mapping[str, object]],
    out: Path,
    created: str | None = None,
    mtime: int = 0,
) -> Written:
    """Writes the OCI layout tar of the image `name` (layers bottom first, `config` the image config's
    "config" object: Entrypoint, Cmd, Env, ...) to `out`; returns its manifest digest."""
    facts = [_layer_facts(layer) for layer in layers]
    image: dict[str, object] = {
        "architecture": "amd64",
        "os": "linux",
        "config": dict(config),
        "rootfs": {"type": "layers", "diff_ids": [d for d, _ in facts]},
        "history": [dict(h) for h in history],
    }
    if created is not None:
        image["created"] = created
    config_blob = canonical_json(image)
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": digest(config_blob), "size": len(config_blob)},
            "layers": [{"mediaType": LAYER, "digest": d, "size": size} for d, size in facts],
        }
    )
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [
                {
                    "mediaType": MANIFEST,
                    "digest": digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        NAME_ANNOTATION: name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
    )
    files: dict[str, Layer] = {
        "oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}),
        "index.json": index,
        **{f"blobs/sha256/{d[7:]}": layer for (d, _), layer in zip(facts, layers, strict=True)},
        **{f"blobs/sha256/{digest(b)[7:]}": b for b in (config_blob, manifest)},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
            tar.addfile(info)
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.mode, info.mtime = 0o644, mtime
            blob = files[path]
            if isinstance(blob, bytes):
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
            else:
                info.size = blob.stat().st_size
                with blob.open("rb") as f:
                    tar.addfile(info, f)
    return Written(digest=digest(manifest), layers_size=sum(size for _, size in facts))


def read_index(archive: Path) -> dict[str, object]:
    """index.json of an archive written here."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive}: no index.json")
        loaded: dict[str, object] = json.loads(member.read())
        return loaded


def copy_blob(archive: Path, blob_digest: str, out: Path) -> None:
    """Copies one blob of an archive to a file (to unpack a layer, say)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"blobs/sha256/{blob_digest.removeprefix('sha256:')}")
        if member is None:
            raise ValueError(f"{archive}: no blob {blob_digest}")
        with out.open("wb") as f:
            shutil.copyfileobj(member, f, _CHUNK)
