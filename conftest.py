"""How `make test` spreads the suite over pytest-xdist's workers (`-n 2 --dist loadscope`; tests/README.md,
"Running in parallel"): a scope is what one worker runs from start to end. The tests below
e2e/scenarios/controlplane/ share a control plane (that folder's conftest.py), those below
e2e/scenarios/realnode/ another with the real node, those below e2e/scenarios/volcano/ a third with Volcano
beside it, and the other scenarios a fourth with the simulated nodes (e2e/scenarios/conftest.py): each of the
four folders is one scope, so no plane, Volcano, simulated node or real node starts twice and two real nodes
never run at once (the real node's scope holds every test that starts one); every other module is a scope of
its own, so its module fixtures start once — those below e2e/scenarios/own_plane/ too, though that folder
lies below e2e/scenarios/: each starts a control plane of its own, so no worker need hold them all. The plane
scopes go first, then the own-plane modules, as they take longest. Without xdist the order is the same and
scopes mean nothing."""

from __future__ import annotations

from typing import Any

import pytest

# the folder whose modules start planes of their own: each module a scope
OWN_PLANES = "e2e/scenarios/own_plane/"
# the folders whose tests share one of e2e's planes, the inner one first
PLANE_SCOPES = (
    "e2e/scenarios/controlplane/",
    "e2e/scenarios/realnode/",
    "e2e/scenarios/volcano/",
    "e2e/scenarios/",
)


def scope_of(nodeid: str) -> str:
    """A plane's folder, or the test's module."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(OWN_PLANES):
        return path
    return next((folder for folder in PLANE_SCOPES if path.startswith(folder)), path)


def handed_out(nodeid: str) -> int:
    """When a test's scope goes to a worker: the shared planes, the own planes, the rest."""
    scope = scope_of(nodeid)
    return 0 if scope in PLANE_SCOPES else 1 if scope.startswith(OWN_PLANES) else 2


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # xdist hands out scopes in the order their first test comes: the longest first
    items.sort(key=lambda item: handed_out(item.nodeid))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope` with the scopes above (xdist's own: module or class), in collection order."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 (only where xdist runs)

    class PlaneScopes(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    config.option.loadscopereorder = False
    return PlaneScopes(config, log)
