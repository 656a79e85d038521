"""The one error of the local broker package."""

from __future__ import annotations


class LocalBrokerError(RuntimeError):
    """The local broker cannot be set up, started or reached; ``str()`` is one line naming the fix."""
