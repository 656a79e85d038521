"""ksched — a multi-tenant, Kafka-native job scheduler.

The package is layered: ``scheduler.domain`` (time, ids, policies) imports no
Kafka; ``scheduler.kafka`` knows confluent-kafka and nothing of the domain;
``scheduler.records`` holds the Avro codecs; the processor and worker join
them.
"""

from __future__ import annotations

__version__ = "0.1.0"
