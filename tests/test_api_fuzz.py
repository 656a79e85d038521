"""Schemathesis over the whole OpenAPI document, in process, against the real stack of
``test_api_e2e`` (issue 13): no 5xx, every status and body as documented, and no route that
answers without a valid key. Slow: hundreds of generated requests (``make test-slow``)."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    ignored_auth,
    response_schema_conformance,
    status_code_conformance,
)
from test_api_e2e import A, Api, api, ready  # noqa: F401 (the fixtures)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_api_keeps_its_documented_contract(ready: Api) -> None:  # noqa: F811
    """Every operation, driven by hypothesis directly (schemathesis' pytest plugin does not load
    under pytest 9: its ``parametrize`` reads a private attribute pytest dropped)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", ready.http.app)
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance, ignored_auth]
    for found in schema.get_all_operations():
        operation = found.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(case: Any) -> None:
            case.call_and_validate(headers=ready.as_(A), checks=checks)

        run()
