"""docs/contract.md's test vectors are what the code computes (a client in another language is
written from that page: a wrong vector there would be a wrong client)."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.domain import occurrence_id, schedule_id_for
from scheduler.kafka.partitioner import partition_for

DOC = (Path(__file__).parent.parent / "docs" / "contract.md").read_text()


def _id(label: str) -> str:
    row = next(line for line in DOC.splitlines() if line.startswith(f"| {label}"))
    found = re.findall(r"`([0-9a-f]{32})`", row)
    assert len(found) == 1, row
    return found[0]


def test_the_id_vectors_of_the_contract_are_the_codes() -> None:
    acme = schedule_id_for("acme", "nightly-report")
    bravo = schedule_id_for("bravo", "k-1")
    assert _id("schedule, tenant `acme`, key `nightly-report`") == acme
    assert _id("occurrence of it, version 1") == occurrence_id(acme, 1, 1798761600)
    assert _id("schedule, tenant `bravo`, key `k-1`") == bravo
    assert _id("occurrence of it, version 3") == occurrence_id(bravo, 3, 1800000000)


def test_the_partitioner_vector_of_the_contract_is_the_codes() -> None:
    m = re.search(r"key `([0-9a-f]{32})`\s*→ partition (\d+) of 4, (\d+) of 12", DOC)
    assert m is not None
    key = m.group(1).encode()
    assert (partition_for(key, 4), partition_for(key, 12)) == (int(m.group(2)), int(m.group(3)))
