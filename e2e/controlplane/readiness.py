"""Waiting until a component answers its health endpoint; failing fast, with its log, when it exits."""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import structlog

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.processes import Component, log_tail

log = structlog.get_logger(__name__)


def insecure_context() -> ssl.SSLContext:
    # KCM and the scheduler serve health checks with certificates they generate themselves.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _fetch(url: str, context: ssl.SSLContext | None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def wait_until(
    component: Component,
    check: Callable[[], bool],
    *,
    what: str,
    timeout_s: float,
    interval_s: float = 0.25,
) -> None:
    """Polls `check` until it returns True; raises with the component's log tail when the process exits or the
    timeout passes."""
    start = time.monotonic()
    last_error = ""
    while True:
        code = component.process.poll()
        if code is not None:
            raise ControlPlaneError(
                f"{component.name} exited with code {code} before {what}; last lines of {component.log}:\n"
                f"{log_tail(component.log)}"
            )
        try:
            if check():
                log.info(
                    "component.ready",
                    component=component.name,
                    check=what,
                    seconds=round(time.monotonic() - start, 2),
                )
                return
        except (OSError, urllib.error.URLError) as e:
            last_error = str(e)
        if time.monotonic() - start > timeout_s:
            raise ControlPlaneError(
                f"{component.name} not ready ({what}) after {timeout_s:.0f}s "
                f"(last error: {last_error or 'none'}); "
                f"last lines of {component.log}:\n{log_tail(component.log)}"
            )
        time.sleep(interval_s)


def wait_for_http_ok(
    component: Component,
    url: str,
    *,
    context: ssl.SSLContext | None,
    timeout_s: float,
    expect_body: str = "ok",
) -> None:
    def check() -> bool:
        status, body = _fetch(url, context)
        return status == 200 and expect_body in body

    wait_until(component, check, what=f"GET {url}", timeout_s=timeout_s)
