"""What a refused call says, read from its body: one parser for the plugin's publisher, the webhook and the
e2e harness; a body that holds no Status message gives the HTTP reason, never an exception."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from dra_driver.io.rest_calls import status_message


def refused(body: str | None) -> ApiException:
    return ApiException(status=422, reason="Unprocessable Entity", body=body)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"kind": "Status", "message": "spec.devices: Too many"}', "spec.devices: Too many"),
        ('{"kind": "Status", "message": ""}', "Unprocessable Entity"),
        ('{"kind": "Status"}', "Unprocessable Entity"),
        ('{"kind": "Status", "message": 7}', "Unprocessable Entity"),
        (
            "[1, 2]",
            "Unprocessable Entity",
        ),  # a JSON list: the publisher's old parser raised AttributeError here
        ("<html>a proxy's page</html>", "Unprocessable Entity"),
        (None, "Unprocessable Entity"),
    ],
)
def test_the_message_else_the_reason(body: str | None, expected: str) -> None:
    assert status_message(refused(body)) == expected


def test_without_a_reason_the_exceptions_first_line() -> None:
    e = ApiException(status=500, reason=None, body="{}")
    assert status_message(e) == str(e).splitlines()[0]
    assert status_message(e).startswith("(500)")
