"""The read-only web console in headless Chromium, on the real stack of ``test_api_e2e`` (broker,
processor, workers, history indexer and store) served by uvicorn on 127.0.0.1 (issue 13, item 5).

The key rides in the URL's fragment (never sent to a server; the page moves it to sessionStorage).
Screenshots: ``artefacts/console-<tenant>.png`` at the repository's root (tests/browser.py).
Slow: its own stack (10-30 s to start) and ~20 s of fires and page loads are over the fast suite's
30 s budget (``make test-slow``, which CI runs).
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import quote

import pytest
from browser import ARTEFACTS, chromium, render, serving
from test_api_e2e import A, Api, B, _fire, _spec, _until, api, ready  # noqa: F401 (the fixtures)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _section(dom: str, name: str) -> str:
    """The text of one ``<section id=...>`` of the dumped DOM, tags dropped."""
    found = re.search(rf'<section id="{name}">(.*?)</section>', dom, re.S)
    assert found, f"no section {name} in the DOM:\n{dom[:3000]}"
    return unescape(re.sub(r"<[^>]+>", " ", found.group(1)))


def _ids(text: str) -> set[str]:
    return set(re.findall(r"\b[0-9a-f]{32}\b", text))


def _open(base: str, key: str, tenant: str, **selection: str) -> str:
    fragment = "&".join(f"{k}={quote(v, safe='')}" for k, v in {"key": key, **selection}.items())
    dom = render(f"{base}/console#{fragment}", ARTEFACTS / f"console-{tenant}.png")
    assert 'data-ready="1"' in dom, f"the page did not finish loading:\n{dom[:3000]}"
    assert key not in dom  # the key left the URL and the page: it is in sessionStorage only
    return dom


def test_the_console_shows_a_tenants_schedules_runs_occurrences_and_dlq_and_nothing_of_another(
    ready: Api,  # noqa: F811
) -> None:
    chromium()  # fail first, and loudly, without a browser
    h, me = ready.http, ready.as_(A)
    created = h.post("/v1/schedules", json=_spec(handler="console-<b>report</b>"), headers=me)
    assert created.status_code == 201, created.text
    sid = created.json()["schedule_id"]
    nexts = h.get(f"/v1/schedules/{sid}?next=10", headers=me).json()["next_fires"]
    once_sid, oid = _fire(ready, A, "ok")
    dead_sid, dead_oid = _fire(ready, A, "broken")
    _until("A's DLQ entry", lambda: dead_oid in _dead(ready, A))

    lag = h.get("/v1/lag?window_minutes=60", headers=me).json()
    assert lag["tenant"] == A and lag["dispatched"] >= 2 and lag["lag_s"]["p50"] is not None, lag
    assert lag["states"].get("SUCCEEDED", 0) >= 1 and lag["states"].get("DEAD", 0) >= 1, lag

    with serving(h.app) as base:
        page = h.get("/console")
        assert page.status_code == 200 and "script-src 'self'" in page.headers["Content-Security-Policy"]
        assert "/console" not in h.get("/openapi.json").json()["paths"]

        dom = _open(base, ready.keys[A], A, schedule=sid, occurrence=oid)
        listed = _section(dom, "schedules-view")
        assert sid in listed and "ACTIVE" in listed
        assert "console-<b>report</b>" in listed and "<b>report" not in dom  # text, never markup
        detail = _section(dom, "schedule-view")
        assert sid in detail and "0 3 * * *" in detail
        assert [f["scheduled_for"] for f in nexts] and all(f["scheduled_for"] in detail for f in nexts)
        occurrence = _section(dom, "occurrence-view")
        assert oid in occurrence and "SUCCEEDED" in occurrence and "Attempts" in occurrence
        dlq = _section(dom, "dlq-view")
        assert dead_oid in dlq and dead_sid in dlq and "no such customer" in dlq
        shown = _section(dom, "lag-view")
        assert "dispatched" in shown and "history store" in shown and "DEAD" in shown
        assert f"tenant {A}" in dom

        done = {
            x["schedule_id"]
            for x in h.get("/v1/schedules?state=COMPLETED&limit=1000", headers=me).json()["items"]
        }
        assert {once_sid, dead_sid} <= done
        page1 = _open(base, ready.keys[A], f"{A}-completed", state="COMPLETED", limit="1")
        first = _ids(_section(page1, "schedules-view"))
        assert len(first) == 1 and first <= done, first
        found = re.search(r'<a href="#([^"]+)" id="next-page"', page1)
        assert found, "at least two completed schedules, one a page: a next page"
        fragment = unescape(found.group(1))
        assert "state=COMPLETED" in fragment and "cursor=" in fragment
        page2 = render(
            f"{base}/console#key={quote(ready.keys[A], safe='')}&{fragment}", ARTEFACTS / "console-page2.png"
        )
        second = _ids(_section(page2, "schedules-view"))
        assert len(second) == 1 and second <= done and second != first, (first, second)
        by_handler = _open(base, ready.keys[A], f"{A}-handler", handler="console-<b>report</b>")
        assert _ids(_section(by_handler, "schedules-view")) == {sid}

        other = _open(base, ready.keys[B], B, schedule=sid, occurrence=oid)
        assert f"tenant {B}" in other
        for section in ("schedules-view", "dlq-view"):
            seen = _section(other, section)
            assert sid not in seen and oid not in seen and dead_oid not in seen, seen
        assert "404" in _section(other, "schedule-view") and "not found" in _section(other, "schedule-view")
        assert "SUCCEEDED" not in _section(other, "occurrence-view")
        assert "404" in _section(other, "occurrence-view")

        _pages_through_the_dlq(ready, base)
        _open_without_key(base)
    assert (ARTEFACTS / f"console-{A}.png").stat().st_size > 10_000  # a rendered page, not a blank one


def _pages_through_the_dlq(stack: Api, base: str) -> None:
    """One dead letter a page: "Next page" and "Previous page" walk A's DLQ both ways (the API's
    cursors go forward only; the fragment keeps the trail)."""
    from scheduler.kafka.clients import producer
    from scheduler.records import DlqEntry, encode
    from scheduler.topology import topic_name

    prod = producer(stack.settings.kafka())  # two more dead letters, as the processor writes them
    for i in (1, 2):
        d = DlqEntry(occurrence_id=f"{i:032x}", schedule_id=f"s-console-{i}", tenant=A, version=1,
                     scheduled_for_ms=1_000 * i, available_at_ms=1_000 * i, lane="STRICT", handler="h",
                     payload=b"", attempts=1, last_error_class="E", last_error_message="no",
                     dead_at_ms=1_000 * i, reason="permanent")
        prod.produce(topic_name(stack.settings, "dlq", A), encode(d), d.schedule_id.encode())
    assert prod.flush(30) == 0
    _until("the two dead letters indexed", lambda: {f"{1:032x}", f"{2:032x}"} <= _dead(stack, A))
    every = _dead(stack, A)
    assert len(every) >= 3

    def page(fragment: str, name: str) -> tuple[set[str], str]:
        dom = render(f"{base}/console#key={quote(stack.keys[A], safe='')}&{fragment}", ARTEFACTS / name)
        assert 'data-ready="1"' in dom
        return _ids(_section(dom, "dlq-view")) & every, dom

    def follow(dom: str, which: str) -> str:
        found = re.search(rf'<a href="#([^"]+)" id="dlq-{which}"', dom)
        assert found, f"no {which} link in the DLQ view:\n{_section(dom, 'dlq-view')}"
        return unescape(found.group(1))

    first, dom1 = page("dlq_limit=1", "console-dlq-page1.png")
    assert len(first) == 1 and "dlq-prev" not in dom1 and "page 1" in _section(dom1, "dlq-view")
    second, dom2 = page(follow(dom1, "next"), "console-dlq-page2.png")
    assert len(second) == 1 and second != first and "page 2" in _section(dom2, "dlq-view")
    third, dom3 = page(follow(dom2, "next"), "console-dlq-page3.png")
    assert len(third) == 1 and third.isdisjoint(first | second)
    back, dom_back = page(follow(dom3, "prev"), "console-dlq-back.png")
    assert back == second and "page 2" in _section(dom_back, "dlq-view")
    again, _ = page(follow(dom_back, "prev"), "console-dlq-back2.png")
    assert again == first


def _dead(stack: Api, tenant: str) -> set[str]:
    return {d["occurrence_id"] for d in stack.http.get("/v1/dlq", headers=stack.as_(tenant)).json()["items"]}


def _open_without_key(base: str) -> str:
    dom = render(f"{base}/console", ARTEFACTS / "console-no-key.png")
    assert "Enter a tenant" in dom and 'data-ready="1"' in dom
    return dom
