"""`python -m tests.bench.tenant_device_opens [SECONDS]`: how often the node daemon opens a device node a
tenant made in its claim directory (issue #34, defect 4; target 0).

Starts the daemon (simulated node, claims from a directory, metrics on a free port), prepares one normal and
one high-priority vgpu claim on GPU 0, replaces each claim's region with a character device of /dev/null's
numbers, as `mknod region c 1 3` in the container leaves it, and counts the real opens of those nodes
(`tests.support.open_watch`) over SECONDS (default 5) while /metrics is scraped once a second. The burst
arbiter reads the normal claim's region and the priority relay the high one's every 10 ms; before every read
refused anything but a regular file unopened, that was ~90 opens a second per claim. Needs root (mknod).
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import time
import urllib.request

from dra_driver.core.families import vgpu
from dra_driver.libtessera.names import REGION_FILE_NAME, SHARED_DIR_NAME
from dra_driver.vocabulary.names import CONFIG_API_VERSION, DRIVER_NAME
from tests.support.kubelet_client import DraClient
from tests.support.open_watch import OpenWatch, make_special
from tests.support.plugin_process import NODE, PluginProcess, cleanup, short_root
from tests.support.sample_claims import allocated_claim, claim_ref, vgpu_claim


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str]) -> int:
    seconds = float(argv[0]) if argv else 5.0
    port = _free_port()
    root = short_root()
    p = PluginProcess(root=root, extra_args=("--metrics-address", f"127.0.0.1:{port}")).start()
    try:
        normal = vgpu_claim("normal", pool=NODE, gpu=0, memory="1Gi", cores="30")
        consumed = {"memory": "1Gi", "cores": "20"}
        high = allocated_claim("high", device="gpu-0-vgpu", family=vgpu.NAME, pool=NODE, consumed=consumed)
        parameters = {"apiVersion": CONFIG_API_VERSION, "kind": "VgpuConfig", "priority": 0}
        opaque = {"driver": DRIVER_NAME, "parameters": parameters}
        config = {"source": "FromClass", "requests": [], "opaque": opaque}
        high["status"]["allocation"]["devices"]["config"] = [config]
        refs = [claim_ref(c) for c in (normal, high)]
        for c in (normal, high):
            p.claims.put(c)
        with DraClient(p.paths.dra_socket) as client:
            errors = [a.error for a in client.prepare(refs).claims.values() if a.error]
        if errors:
            print(f"prepare failed: {errors}")
            return 1
        regions = {}
        for name, ref in zip(("normal (arbiter)", "high (relay)"), refs, strict=True):
            region = p.paths.claim_dir(ref.uid) / SHARED_DIR_NAME / REGION_FILE_NAME
            region.unlink()
            make_special(region, "character device")
            assert stat.S_ISCHR(region.lstat().st_mode)
            regions[name] = region
        with OpenWatch(*regions.values()) as watch:
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    r.read()
                time.sleep(1.0)
            elapsed = time.monotonic() - t0
            opens = watch.opens()
        total = 0
        for name, region in regions.items():
            total += opens[region]
            print(f"{name}: {opens[region]} opens in {elapsed:.1f} s = {opens[region] / elapsed:.1f}/s")
        print(f"daemon opens of a tenant device node: {total / elapsed:.1f}/s (target 0)")
        return 0 if total == 0 and p.proc is not None and p.proc.poll() is None else 1
    finally:
        cleanup([p], root)


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("needs root: mknod of a character device")
    sys.exit(main(sys.argv[1:]))
