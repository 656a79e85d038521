"""``scheduler.kafka.reader.watermarks``: a partition whose leader is not settled is asked again."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from scheduler.kafka.errors import AccessDenied
from scheduler.kafka.reader import watermarks


class FlakyConsumer:
    """Answers like a broker right after a topic was created: not the leader, then the offsets."""

    def __init__(self, failures: int, code: int = KafkaError.NOT_LEADER_FOR_PARTITION) -> None:
        self.failures, self.code, self.calls = failures, code, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return 3, 7


def test_a_partition_without_a_settled_leader_is_asked_again() -> None:
    c = FlakyConsumer(2)
    assert watermarks(c, TopicPartition("t", 0)) == (3, 7)  # type: ignore[arg-type]
    assert c.calls == 3


def test_a_lasting_or_other_error_is_raised() -> None:
    with pytest.raises(KafkaException):
        watermarks(FlakyConsumer(10**6), TopicPartition("t", 0), timeout_s=0.3)  # type: ignore[arg-type]
    with pytest.raises(AccessDenied, match=r"may not read topic t \(TOPIC_AUTHORIZATION_FAILED\)"):
        watermarks(FlakyConsumer(1, KafkaError.TOPIC_AUTHORIZATION_FAILED), TopicPartition("t", 0))  # type: ignore[arg-type]
