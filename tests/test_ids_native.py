"""The occurrence id's C copy (``scheduler/domain/_ids_native.c``) against its Python copy and
against hashlib's BLAKE2b computed here from DESIGN.md §1's encoding, an independent oracle:
every length of schedule id around BLAKE2b's 128-byte blocks, any Unicode, both ends of the
64-bit range, and the same errors for ints that are not 64-bit and ids that do not encode. (A
schedule id that is not a str is a TypeError in C, an AttributeError in Python: every caller
passes a str, and ``ids.occurrence_id`` checks it first.)"""

from __future__ import annotations

import struct
import sys
from hashlib import blake2b
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import native
from scheduler.domain import ids

I64 = st.integers(-(2**63), 2**63 - 1)


def _c() -> ModuleType:
    c = native.load_c("scheduler.domain._ids_native")
    assert c is not None, "run `make install`: the C copy is not built"
    return c


def _oracle(sid: str, version: int, sf: int) -> str:
    raw = sid.encode("utf-8")
    data = len(raw).to_bytes(4, "big") + raw + version.to_bytes(8, "big", signed=True) + sf.to_bytes(
        8, "big", signed=True)
    return blake2b(data, digest_size=16, person=b"ksched.occ.v1").hexdigest()


def test_the_module_runs_the_c_copy() -> None:
    assert ids.occurrence_id_of is _c().occurrence_id_of


SIDS = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300)


@settings(max_examples=500, deadline=None)
@given(sid=SIDS, version=I64, sf=I64)
def test_c_python_and_hashlib_agree(sid: str, version: int, sf: int) -> None:
    want = _oracle(sid, version, sf)
    assert _c().occurrence_id_of(sid, version, sf) == ids._occurrence_id_of(sid, version, sf) == want


@pytest.mark.parametrize("n", [*range(100, 112), *range(230, 240), 1, 2000])  # 4 + n + 16 around 128, 256
def test_every_block_boundary(n: int) -> None:
    sid = "s" * n
    assert _c().occurrence_id_of(sid, 3, 1_800_000_000) == _oracle(sid, 3, 1_800_000_000)


@pytest.mark.parametrize("args", [("a", 2**63, 0), ("a", 1, -(2**63) - 1), ("a", "1", 0), ("a", 1, 1.5)])
def test_both_copies_refuse_what_is_not_a_64_bit_int(args: tuple[str, object, object]) -> None:
    for fn in (_c().occurrence_id_of, ids._occurrence_id_of):
        with pytest.raises(struct.error):
            fn(*args)


def test_an_int_by_its_index_is_taken_as_struct_pack_takes_it() -> None:
    class Seven:
        def __index__(self) -> int:
            return 7

    seven: int = Seven()  # type: ignore[assignment]
    want = _oracle("a", 7, 7)
    assert _c().occurrence_id_of("a", seven, seven) == ids._occurrence_id_of("a", seven, seven) == want


def test_a_non_ascii_id_keeps_its_size() -> None:
    """The C copy encodes into a buffer of its own: the string keeps no UTF-8 copy (a shard's
    entries' ids pass through it)."""
    sid = "é" * 200
    before = sys.getsizeof(sid)
    assert _c().occurrence_id_of(sid, 1, 1) == _oracle(sid, 1, 1)
    assert sys.getsizeof(sid) == before


def test_a_lone_surrogate_is_refused_as_str_encode_refuses_it() -> None:
    for fn in (_c().occurrence_id_of, ids._occurrence_id_of):
        with pytest.raises(UnicodeEncodeError):
            fn("a\ud800", 1, 1)
