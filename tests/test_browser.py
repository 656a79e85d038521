"""The browser helper of the console's test fails loudly, naming the fix, without a browser (no Kafka)."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import chromium


def test_without_chromium_the_browser_test_fails_naming_make_chromium(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KSCHED_TEST_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="make chromium"):
        chromium()
    monkeypatch.setenv("KSCHED_TEST_CHROMIUM", str(tmp_path) + "/no-such-chromium")
    with pytest.raises(pytest.fail.Exception, match=r"no-such-chromium.*make chromium"):
        chromium()
