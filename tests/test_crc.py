"""Both CRC-32C paths of the compiled helper against an independent pure-Python CRC-32C.

``aclprof_signature`` uses the SSE4.2 instruction when the CPU has it and a table otherwise,
so on a test machine with SSE4.2 only the instruction ever ran and a fault in the table (a
wrong polynomial, say) survived every test (issue 13). ``aclprof_crc_force_software`` makes
the table path run on such a machine too; the reference is ``signature`` in
tests/test_decoder.py (its own table, pinned by the value the record reference quotes).
"""

from __future__ import annotations

import platform
import random
from collections.abc import Iterator

import pytest
from test_decoder import signature

from aclprof.binding._fast import ffi, lib
from aclprof.binding.opdecode import OP_ROW_SIZE
from aclprof.protocol._batchgroup import crc32c_fast

# Sizes around the instruction path's 8-byte steps and the 4-byte signature field (sizes <= 4
# sign nothing), the record sizes (72, 80), and a few large ones.
SIZES = [0, 1, 4, 5, 6, 11, 12, 13, 19, 20, 21, 72, 80, 255, 256, 257, 1000, 4096, 4099]


def _cases() -> Iterator[tuple[bytes, int]]:
    """Random records (fixed seed) of every size above plus random sizes, each at an offset
    0..7 into its buffer so the unaligned loads of the instruction path are exercised."""
    rng = random.Random(0xC2C)
    sizes = SIZES + [rng.randrange(0, 3000) for _ in range(60)]
    for size in sizes:
        for _ in range(3):
            offset = rng.randrange(8)
            yield rng.randbytes(offset + size), offset


def _compiled(buf: bytes, offset: int) -> int:
    rec = ffi.from_buffer(buf) + offset
    return int(lib.aclprof_signature(rec, len(buf) - offset))


@pytest.fixture
def software_crc() -> Iterator[None]:
    previous = lib.aclprof_crc_force_software(1)
    try:
        yield
    finally:
        lib.aclprof_crc_force_software(previous)


def test_the_table_path_matches_the_reference(software_crc):
    assert lib.aclprof_crc_hardware() == 0
    for buf, offset in _cases():
        assert _compiled(buf, offset) == signature(buf[offset:]), (len(buf) - offset, offset)


def _cpu_has_sse42() -> bool:
    """What the kernel says of this CPU (x86-64 Linux), independent of the helper's own test."""
    if platform.machine() != "x86_64":
        return False
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and " sse4_2" in line for line in f)


def test_the_hardware_path_is_taken_where_the_cpu_has_it():
    """The helpers' CPU test agrees with the kernel's flags: a test that said "no SSE4.2" on a
    CPU that has it would only skip the instruction path's tests (it did once: a bit mask taken
    for 1)."""
    assert bool(lib.aclprof_crc_hardware()) == _cpu_has_sse42()
    assert crc32c_fast() == _cpu_has_sse42()


def test_the_instruction_path_matches_the_reference():
    if not lib.aclprof_crc_hardware():
        pytest.skip("this CPU has no SSE4.2: the table path is the only one")
    for buf, offset in _cases():
        assert _compiled(buf, offset) == signature(buf[offset:]), (len(buf) - offset, offset)


def test_forcing_is_undone_and_reports_the_previous_setting():
    hardware = lib.aclprof_crc_hardware()
    assert lib.aclprof_crc_force_software(1) == 0
    try:
        assert lib.aclprof_crc_hardware() == 0
        assert lib.aclprof_crc_force_software(1) == 1
    finally:
        assert lib.aclprof_crc_force_software(0) == 1
    assert lib.aclprof_crc_hardware() == hardware


def test_the_decode_loop_validates_with_the_forced_table(software_crc):
    """The op decoder (aclprof_decode_ops, the product's loop) checks signatures through
    the same switch: a good record passes, the same record with one flipped byte is CORRUPT."""
    interner = ffi.gc(lib.aclprof_interner_new(16), lib.aclprof_interner_free)
    body = bytes(range(4, 80))
    good = signature(b"\0\0\0\0" + body).to_bytes(4, "little") + body
    bad = good[:40] + bytes([good[40] ^ 1]) + good[41:]
    for buf, rows_expected, corrupt_expected in ((good, 1, 0), (bad, 0, 1), (good + bad, 1, 1)):
        n = len(buf) // 80
        out = ffi.new("uint8_t[]", n * OP_ROW_SIZE)
        counts = ffi.new("aclprof_decode_counts *")
        rows = lib.aclprof_decode_ops(interner, ffi.from_buffer(buf), n, 80, 1, 0, out, counts)
        assert (rows, counts.corrupt) == (rows_expected, corrupt_expected), (n, rows, counts.corrupt)
