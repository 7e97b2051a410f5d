"""The strict JSON check's first pass over a value (io.deltaflow.json.StrictJson.scan) reads eight
bytes at a time: it must still see a byte outside ASCII (only then can the value be invalid
UTF-8) and a backslash (only then can it hold a lone surrogate) wherever they sit, in a word or
in the tail after the last whole word. Real JVM, the runtime's jar."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]


def expected(value: bytes) -> int:
    """What the scan should find, byte by byte: 1 for a non-ASCII byte, 2 for a backslash."""
    return (1 if any(b >= 0x80 for b in value) else 0) | (2 if b"\\" in value else 0)


def test_the_scan_finds_every_non_ascii_byte_and_backslash_at_any_position(
    runtime_spark: SparkSession,
) -> None:
    jvm: Any = runtime_spark.sparkContext._jvm
    strict = getattr(jvm, "io.deltaflow.json.StrictJson")
    assert (strict.NON_ASCII, strict.BACKSLASH) == (1, 2)
    values: list[bytes] = [b""]
    for length in range(1, 26):
        base = b"a" * length
        values.append(base)
        for at in range(length):
            # each byte that matters alone at each position, and bytes around it that do not
            # (0x5B/0x5D differ from the backslash 0x5C by one bit; 0x7F is the last ASCII)
            for odd in (b"\\", b"\x80", b"\xff", b"\xdc"):
                values.append(base[:at] + odd + base[at + 1 :])
            values.append(base[:at] + b"[]\x7f\x00"[at % 4 : at % 4 + 1] + base[at + 1 :])
    chance = random.Random(7)
    alphabet = b"ab[]\\\x7f\x80\xc3\xff\x00 "
    values += [
        bytes(chance.choice(alphabet) for _ in range(chance.randrange(0, 40))) for _ in range(2000)
    ]
    found = [int(strict.scan(bytearray(v))) for v in values]
    wrong = [(v, f, expected(v)) for v, f in zip(values, found, strict=True) if f != expected(v)]
    assert wrong == []
