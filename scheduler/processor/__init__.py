"""The partition-owning processor (DESIGN.md §4): shard model, lanes, the tick and its Kafka runtime."""
