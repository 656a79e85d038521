"""The OpenAPI document: the committed one is the served one, and every operation has examples
and declares its problem answers (no broker: the document is built from the code)."""

from __future__ import annotations

import json

from scheduler.api.server import OPENAPI_FILE, openapi_document, openapi_text
from scheduler.cli import main


def test_the_committed_document_is_the_served_one() -> None:
    assert OPENAPI_FILE.read_text() == openapi_text(), "stale docs/openapi.json: run `ksched api openapi`"
    assert main(["api", "openapi", "--check"]) == 0


def test_every_operation_has_an_example_and_the_v1_ones_need_a_key() -> None:
    spec = openapi_document()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            ok = {k: v for k, v in op["responses"].items() if k.startswith("2")}
            examples = [c for r in ok.values() for c in r.get("content", {}).values() if "example" in c]
            assert examples, f"{method.upper()} {path} has no example answer"
            if path.startswith("/v1/"):
                assert op.get("security") == [{"HTTPBearer": []}], f"{method.upper()} {path}"
                assert {"401", "422", "429"} <= set(op["responses"]), f"{method.upper()} {path}"
                problem = op["responses"]["401"]["content"]["application/problem+json"]
                assert problem["schema"] == {"$ref": "#/components/schemas/Problem"}
    body = spec["components"]["schemas"]["ScheduleSpecIn"]
    assert body["additionalProperties"] is False and body["examples"]
    assert json.dumps(spec)  # serialisable as served
