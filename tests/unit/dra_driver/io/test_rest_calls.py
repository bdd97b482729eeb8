"""The API server's message read from a refused call's body: one parser for the plugin's publisher, the
webhook and the e2e harness; a body that holds no Status object gives None, never an exception."""

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
        ('{"kind": "Status", "message": ""}', ""),
        ('{"kind": "Status"}', None),
        ('{"kind": "Status", "message": 7}', None),
        ("[1, 2]", None),  # a JSON list: the publisher's old parser raised AttributeError here
        ("<html>a proxy's page</html>", None),
        (None, None),
    ],
)
def test_the_message_or_none(body: str | None, expected: str | None) -> None:
    assert status_message(refused(body)) == expected
