"""A topic namespace of its own for a test module on the session broker, with its own tenants
file, seen by the CLI through the environment; on exit its topics, principals, ACLs and kept
passwords are gone."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from scheduler.access_admin import forget_namespace
from scheduler.kafka.admin import admin_client
from scheduler.principals import as_admin
from scheduler.settings import Settings


@contextlib.contextmanager
def own_namespace(base: Settings, suffix: str, tenants_file: Path, **changes: object) -> Iterator[Settings]:
    """``base`` with the namespace ``<base namespace>-<suffix>`` and ``tenants_file``."""
    settings = base.replace(namespace=f"{base.namespace}-{suffix}", tenants_file=tenants_file, **changes)
    env = {"KSCHED_NAMESPACE": settings.namespace, "KSCHED_TENANTS_FILE": str(settings.tenants_file)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield settings
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        drop_namespace(settings)


def drop_namespace(settings: Settings) -> None:
    """Delete the namespace's topics and forget its principals (ACLs, credentials, passwords)."""
    admin = admin_client(as_admin(settings))
    doomed = [t for t in admin.list_topics(timeout=10).topics if t.startswith(settings.namespace + ".")]
    if doomed:
        for f in admin.delete_topics(doomed, operation_timeout=30).values():
            f.result(60)  # wait: a client dropped at once may never send the request
    forget_namespace(settings)
