"""The console's files as served, without a broker (the page itself is driven in Chromium by the
slow ``test_console_e2e``): content types, the CSP, no HTML parsing of data, and not in the spec."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.api.console import STATIC
from scheduler.api.server import openapi_document


def test_the_console_is_served_with_its_csp_and_is_no_api_operation() -> None:
    http = TestClient(create_app(None))  # type: ignore[arg-type]  # the static routes need no services
    page = http.get("/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        r = http.get(f"/console/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), name
    assert not [p for p in openapi_document()["paths"] if p.startswith("/console")]


def test_the_script_never_parses_data_as_html_and_finds_every_element_it_names() -> None:
    script = (STATIC / "console.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, f"console.js uses {sink}: write data with textContent / el()"
    page = (STATIC / "console.html").read_text()
    ids = set(re.findall(r'id="([^"]+)"', page))
    named = set(re.findall(r'getElementById\("([^"]+)"\)', script))
    assert named and named <= ids, f"console.js names elements the page lacks: {named - ids}"
    sections = set(re.findall(r'show\(\s*"([a-z-]+)"', script)) | set(
        re.findall(r'guarded\("([a-z-]+)"', script)
    )
    assert sections and sections <= ids, sections - ids
