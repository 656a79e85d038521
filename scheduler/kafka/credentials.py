"""The credentials file: SASL user names and passwords, readable by its owner only.

One JSON object ``{"version": 1, "users": {"NAME": "PASSWORD", ...}}``. Written by
``ksched kafka start`` (the admin and service principals of the embedded broker) and
``ksched tenants add | rotate-credentials | remove``; read by every client that is not
given a password explicitly.

Contract: the file is created with mode 0600 by ``os.open`` — the secret is never on disk
with wider permissions, not even for a moment — and replaced atomically (a temp file in
the same directory, then ``os.replace``) under an exclusive lock, so concurrent writers
never lose each other's users and a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

FILE_MODE = 0o600


class CredentialsError(RuntimeError):
    """The credentials file is missing, unreadable or lacks a user; the message names the fix."""


def new_password() -> str:
    """A random password (32 URL-safe characters, ~190 bits)."""
    return secrets.token_urlsafe(24)


def read_users(path: Path) -> dict[str, str]:
    """The users and passwords in ``path``. Raises :class:`CredentialsError` naming the file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CredentialsError(
            f"credentials file {path} does not exist; start the embedded broker with "
            "`ksched kafka start`, or set KSCHED_CREDENTIALS_FILE (or KSCHED_SASL_USERNAME and "
            "KSCHED_SASL_PASSWORD) for your own cluster"
        ) from None
    except (OSError, ValueError) as exc:
        raise CredentialsError(f"credentials file {path} cannot be read: {exc}") from None
    users = data.get("users") if isinstance(data, dict) else None
    if not isinstance(users, dict):
        raise CredentialsError(f"credentials file {path} has no \"users\" object; delete it and restart")
    return {str(k): str(v) for k, v in users.items()}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_secret_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, born 0600 (never chmod-ed after the secret is in it)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def update_users(path: Path, changes: dict[str, str | None]) -> dict[str, str]:
    """Set (a password) or remove (``None``) users in ``path``, creating it; return the new map."""
    with _locked(path):
        users = read_users(path) if path.exists() else {}
        for name, password in changes.items():
            if password is None:
                users.pop(name, None)
            else:
                users[name] = password
        write_secret_file(path, json.dumps({"version": 1, "users": users}, indent=1, sort_keys=True) + "\n")
        return users


def ensure_user(path: Path, name: str) -> str:
    """``name``'s password from ``path``, generated and stored first when it has none."""
    with _locked(path):
        users = read_users(path) if path.exists() else {}
        if name in users:
            return users[name]
        users[name] = new_password()
        write_secret_file(path, json.dumps({"version": 1, "users": users}, indent=1, sort_keys=True) + "\n")
        return users[name]
