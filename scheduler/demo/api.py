"""The demo's HTTP API: the demo tenant's key, made at each start, and waiting for ``/readyz``.

Each ``ksched demo`` makes a fresh key for the tenant ``demo`` and prints it once (only its hash
is kept, as for ``ksched tenants api-key create``); the key the previous run printed is revoked
then, so a demo run again and again leaves one live key, not one per run.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request

from scheduler.settings import Settings

KEY_LABEL = "ksched demo"


def demo_api_key(settings: Settings, tenant: str) -> str:
    """A new API key for ``tenant`` (the earlier demo keys revoked)."""
    from scheduler.tenant_admin import create_api_key, current, revoke_api_key

    table = current(settings)
    for old in table.target[tenant].api_keys:
        if old.active and old.label == KEY_LABEL:
            revoke_api_key(settings, table, table.target[tenant], old.key_id)
            table = current(settings)
    key, _ = create_api_key(settings, table, table.target[tenant], KEY_LABEL)
    return key


def api_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.api_port}"


def wait_ready(
    url: str, proc: subprocess.Popen[bytes], timeout_s: float, path: str = "/readyz"
) -> str | None:
    """None once ``url`` + ``path`` answers 200; else why not (the process exited, or the last
    answer when ``timeout_s`` ran out)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"the API exited with status {proc.returncode}"
        try:
            with urllib.request.urlopen(url + path, timeout=2) as r:
                if r.status == 200:
                    return None
        except urllib.error.HTTPError as exc:  # 503: which check fails
            last = json.dumps(json.loads(exc.read() or b"{}").get("checks", {}))
        except OSError as exc:
            last = str(exc)
        time.sleep(0.5)
    return f"{path} not ready after {timeout_s:.0f}s: {last}"
