"""Errors a worker raises before it runs anything; messages name the setting and the fix."""

from __future__ import annotations


class WorkerConfigError(ValueError):
    """The worker cannot start as configured (unknown tenant, bad limit, missing topic)."""


class TopicMissingError(WorkerConfigError):
    """A tenant topic the worker needs does not exist."""
