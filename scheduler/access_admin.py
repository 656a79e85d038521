"""The admin's side of access: principals' SCRAM credentials and ACLs put on the cluster, and the
connection each process makes as its own principal.

:mod:`scheduler.access` says who gets which bindings (pure); this module applies it through
:mod:`scheduler.kafka.acls` as the admin, and keeps the passwords in the credentials file
(:mod:`scheduler.kafka.credentials`, mode 0600) when ksched keeps them: for the embedded
broker, or when ``credentials_file`` is set. For a cluster of your own without a credentials
file, a new tenant's password is only printed (or written with ``--credentials-out``).

Without SASL (``security_protocol`` PLAINTEXT or SSL) nothing is applied: an ACL on a SCRAM
principal means nothing to a client that cannot be that principal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler import access
from scheduler.kafka.acls import await_login, create_acls, delete_principal_acls, revoke_scram, upsert_scram
from scheduler.kafka.admin import AdminError, admin_client
from scheduler.kafka.credentials import new_password, read_users, update_users
from scheduler.principals import as_admin
from scheduler.settings import Settings

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient


# How long a new credential may take to reach every broker's login cache before issuing it fails.
LOGIN_WAIT_S = 30.0


@dataclass(frozen=True)
class IssuedCredentials:
    """A principal's new password, to be handed to its owner once; ``stored``: in the credentials file."""

    user: str
    password: str
    stored: bool


def sasl(settings: Settings) -> bool:
    return settings.security_protocol.startswith("SASL_")


def keeps_passwords(settings: Settings) -> bool:
    """True when ksched keeps passwords in the credentials file (embedded broker, or the file is set)."""
    return settings.embedded or bool(settings.credentials_file)


# -- applying ------------------------------------------------------------------------------------
def _issue(settings: Settings, admin: AdminClient, user: str, password: str) -> IssuedCredentials:
    """Set ``user``'s credential and return once every broker accepts it (a caller may log in at once)."""
    upsert_scram(admin, user, password, settings.sasl_mechanism)
    if not await_login(as_admin(settings).as_user(user, password), LOGIN_WAIT_S):
        raise AdminError(
            f"the brokers at {settings.bootstrap_servers} still refuse the new credential of {user} after "
            f"{LOGIN_WAIT_S:g} s: check the brokers' health (`ksched kafka status`), then issue it again"
        )
    stored = keeps_passwords(settings)
    if stored:
        update_users(settings.credentials_path, {user: password})
    return IssuedCredentials(user, password, stored)


def _known(settings: Settings) -> dict[str, str]:
    path = settings.credentials_path
    return read_users(path) if keeps_passwords(settings) and path.exists() else {}


def ensure_services(settings: Settings) -> list[str]:
    """The service principals with their ACLs; a credential is made for one ksched keeps no
    password of yet. Idempotent. Returns the users given a new credential."""
    if not sasl(settings):
        return []
    admin = admin_client(as_admin(settings))
    known, issued = _known(settings), []
    for p, bindings in access.service_principals(settings.namespace):
        create_acls(admin, bindings)
        if keeps_passwords(settings) and p.user not in known:
            issued.append(_issue(settings, admin, p.user, new_password()).user)
    return issued


def ensure_tenants(settings: Settings, names: list[str]) -> list[str]:
    """Each tenant's ACLs; a credential (kept in the file) for one ksched keeps no password of
    yet — seeded tenants of the embedded broker get theirs here. Returns the users given one."""
    if not sasl(settings) or not names:
        return []
    admin = admin_client(as_admin(settings))
    known, issued = _known(settings), []
    for name in names:
        create_acls(admin, access.tenant_bindings(settings.namespace, name))
        user = access.tenant(settings.namespace, name).user
        if keeps_passwords(settings) and user not in known:
            issued.append(_issue(settings, admin, user, new_password()).user)
    return issued


def add_tenant(settings: Settings, name: str) -> IssuedCredentials | None:
    """Tenant ``name``'s ACLs and a new credential (replacing any). None without SASL."""
    if not sasl(settings):
        return None
    admin = admin_client(as_admin(settings))
    create_acls(admin, access.tenant_bindings(settings.namespace, name))
    return _issue(settings, admin, access.tenant(settings.namespace, name).user, new_password())


def rotate_tenant(settings: Settings, name: str) -> IssuedCredentials | None:
    """A new password for tenant ``name``: the old one stops working at once. None without SASL."""
    if not sasl(settings):
        return None
    admin = admin_client(as_admin(settings))
    return _issue(settings, admin, access.tenant(settings.namespace, name).user, new_password())


def forget_namespace(settings: Settings) -> int:
    """Forget every principal of ``settings.namespace`` whose password ksched keeps: delete its ACLs
    and the kept password, revoke its SCRAM credential (a test run's or a bench's namespace).
    Returns how many."""
    if not sasl(settings) or not keeps_passwords(settings):
        return 0
    users = [u for u in _known(settings) if u.startswith(settings.namespace + ".")]
    if not users:
        return 0
    admin = admin_client(as_admin(settings))
    for user in users:
        delete_principal_acls(admin, f"User:{user}")
        revoke_scram(admin, user, settings.sasl_mechanism)
    update_users(settings.credentials_path, dict.fromkeys(users))
    return len(users)


def remove_tenant(settings: Settings, name: str) -> int:
    """Delete tenant ``name``'s ACLs (and its kept password) and revoke its SCRAM credential;
    returns the number of ACLs deleted."""
    if not sasl(settings):
        return 0
    p = access.tenant(settings.namespace, name)
    admin = admin_client(as_admin(settings))
    deleted = delete_principal_acls(admin, p.kafka_principal)
    revoke_scram(admin, p.user, settings.sasl_mechanism)
    if keeps_passwords(settings) and settings.credentials_path.exists():
        update_users(settings.credentials_path, {p.user: None})
    return deleted
