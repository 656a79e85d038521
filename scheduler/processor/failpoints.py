"""Crash points for the crash tests: ``KSCHED_FAILPOINT=<point>[:<n>]``.

The checkpoint (:mod:`scheduler.processor.checkpoint`) reaches each point at a fixed step of a
tick that emits dispatch records; the slow crash tests kill the processor there and check
that the next owner emits every occurrence exactly once.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("ksched.processor")

# In commit order: around step 2's dispatch records, then around step 5's commit.
FAILPOINTS = ("before_produce", "after_produce", "before_commit", "after_commit")


class FailpointHook(Protocol):
    """What the checkpoint calls at each point (tests substitute their own, e.g. one that stops)."""

    def hit(self, point: str) -> None: ...


@dataclass
class Failpoint:
    """``KSCHED_FAILPOINT=<point>[:<n>]``: ``os._exit(137)`` the n-th time (default 1st)
    that ``point`` is reached in a tick that emits dispatch records. For crash tests only."""

    point: str | None = None
    remaining: int = 1

    @staticmethod
    def from_env() -> Failpoint:
        """The failpoint named by the environment; none when unset. Raises ValueError for an unknown point."""
        raw = os.environ.get("KSCHED_FAILPOINT", "")
        if not raw:
            return Failpoint()
        point, _, n = raw.partition(":")
        if point not in FAILPOINTS:
            raise ValueError(f"KSCHED_FAILPOINT: {point!r} is not one of {', '.join(FAILPOINTS)}")
        return Failpoint(point, int(n or 1))

    def hit(self, point: str) -> None:
        if point == self.point:
            self.remaining -= 1
            if self.remaining <= 0:
                log.warning("failpoint %s: exiting", point)
                os._exit(137)  # no cleanup: the open transaction is left for the next owner to abort
