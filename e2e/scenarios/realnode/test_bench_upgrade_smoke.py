"""`make bench-upgrade` in its smoke form (tests/README.md, "Smoke forms"): its own control plane and real
node, as the full form, with one worker and one pod before and one after each switch. The upgrade must still
be seamless (a failed pod or a leftover fails it); its figures mean nothing. test_real_upgrade.py asserts the
upgrade itself on the session's real node."""

from __future__ import annotations

import os

import pytest

from e2e.realnode.binaries import check_built
from e2e.realnode.errors import RealNodeError
from tests.support.smoke import covers, lines_with, make_smoke

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


@covers("make bench-upgrade")
@pytest.mark.timeout(600)
def test_bench_upgrade_smoke() -> None:
    if os.geteuid() != 0:
        pytest.skip("the real node needs root: namespaces, mounts, cgroups")
    try:
        check_built()
    except RealNodeError as e:
        pytest.skip(f"the real node is not built: {e}")
    done = make_smoke("bench-upgrade", timeout=580)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    missing = lines_with(
        done.stdout,
        "starting the real node",
        "installed with helm in",
        "1 workers create/delete vgpu pods; `helm upgrade` twice",
        "  pods_created ",
        "  switch_s ",
        "  leftovers ",
    )
    assert missing == [], done.stdout
