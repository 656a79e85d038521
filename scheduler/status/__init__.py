"""``ksched status``: is every shard owned and on time, and how do the tenants stand (issue 16).

:mod:`~scheduler.status.model` (pure: the view and its verdict), :mod:`~scheduler.status.collect`
(Kafka: group descriptions, offsets, the state topic), :mod:`~scheduler.status.render` (rich).
"""

from scheduler.status.model import StatusView, problems, to_json

__all__ = ["StatusView", "problems", "to_json"]
