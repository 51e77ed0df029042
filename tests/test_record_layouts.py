"""Each op record layout is defined once, in ``cdefs/aclprof_records.h`` (issue 18).

The numpy dtypes are the C structs (cffi's offsets for the binding, ``_jsonl``'s for the
protocol layer, which loads no cffi), the wire record keeps protocol 1's bytes, and no file
keeps an offset table of its own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from aclprof.api.records import OP_DTYPE, RAW_DTYPE_72, RAW_DTYPE_80, raw_dtype
from aclprof.binding.built import import_built
from aclprof.protocol import wire

REPO = Path(__file__).resolve().parent.parent
HEADER = REPO / "cdefs" / "aclprof_records.h"
FFI = import_built("_fast").ffi
TEN = ("model_id", "op_name", "op_type", "flag", "thread_id", "device_id", "start", "end",
       "duration", "execution_time")


def test_op_dtype_is_the_c_op_row():
    assert OP_DTYPE.names == (*TEN, "keypoint")
    assert OP_DTYPE.itemsize == FFI.sizeof("aclprof_op_row") == 57
    for name in TEN:
        assert OP_DTYPE.fields[name][1] == FFI.offsetof("aclprof_op_row", "rec", name), name
        assert OP_DTYPE.fields[name][0].itemsize == FFI.sizeof(FFI.typeof("aclprof_record").fields[
            TEN.index(name)][1].type)
    assert OP_DTYPE.fields["keypoint"][1] == FFI.offsetof("aclprof_op_row", "keypoint")
    assert OP_DTYPE.fields["keypoint"][0] == np.dtype(bool)


def test_wire_record_and_op_row_are_one_record_in_two_byte_orders():
    """RECORD_DTYPE (built from _jsonl, no cffi) is the C record, and an op row starts with
    the same ten fields at the same offsets."""
    assert wire.RECORD_DTYPE.itemsize == FFI.sizeof("aclprof_record")
    assert wire.RECORD_DTYPE.names == TEN
    for name in TEN:
        assert wire.RECORD_DTYPE.fields[name][1] == FFI.offsetof("aclprof_record", name)
        assert wire.RECORD_DTYPE.fields[name][1] == OP_DTYPE.fields[name][1]
        assert wire.RECORD_DTYPE.fields[name][0].newbyteorder("=") == OP_DTYPE.fields[name][0]
    assert wire.FLAG_KEYPOINT == import_built("_fast").lib.ACLPROF_FLAG_KEYPOINT == 1 << 31


def test_wire_record_keeps_protocol_1_bytes():
    """The wire format is versioned (daemon/PROTOCOL.md): whatever the header says, these
    bytes are protocol 1's BATCH record."""
    assert wire.RECORD_DTYPE == np.dtype([
        ("model_id", "<u4"), ("op_name", "<u4"), ("op_type", "<u4"), ("flag", "<u4"),
        ("thread_id", "<u4"), ("device_id", "<u4"), ("start", "<u8"), ("end", "<u8"),
        ("duration", "<u8"), ("execution_time", "<u8")])
    rec = np.zeros(1, wire.RECORD_DTYPE)
    rec[0] = (1, 2, 3, 4 | wire.FLAG_KEYPOINT, 5, 6, 7, 8, 9, 10)
    assert rec.tobytes() == (bytes.fromhex("01000000 02000000 03000000 04000080 05000000 06000000")
                             + b"".join(v.to_bytes(8, "little") for v in (7, 8, 9, 10)))


def test_raw_dtypes_are_prof_op_desc():
    assert RAW_DTYPE_80.itemsize == FFI.sizeof("ProfOpDesc") == 80
    assert RAW_DTYPE_72.itemsize == FFI.offsetof("ProfOpDesc", "devId") == 72
    assert "devId" not in RAW_DTYPE_72.names
    for name in RAW_DTYPE_80.names:
        assert RAW_DTYPE_80.fields[name][1] == FFI.offsetof("ProfOpDesc", name), name
    assert raw_dtype(80) is RAW_DTYPE_80 and raw_dtype(72) is RAW_DTYPE_72 and raw_dtype(64) is None


def test_keypoint_mask_reads_the_flag_bit():
    rec = np.zeros(3, wire.RECORD_DTYPE)
    rec["flag"] = [1, 1 | wire.FLAG_KEYPOINT, wire.FLAG_KEYPOINT]
    assert wire.keypoint_mask(rec).tolist() == [False, True, True]


def _sources(*globs: str) -> list[Path]:
    return sorted(p for g in globs for p in REPO.glob(g) if "_acl_ffi" not in p.name)


def test_each_struct_is_declared_once_in_the_shared_header():
    for struct in ("ProfOpDesc", "aclprof_record", "aclprof_op_row"):
        where = [p.relative_to(REPO).as_posix()
                 for p in _sources("cdefs/*.h", "aclprof/**/*.[ch]", "mock_acl/src/*.[ch]")
                 if re.search(rf"typedef struct {struct}\b", p.read_text(encoding="utf-8"))]
        assert where == ["cdefs/aclprof_records.h"], (struct, where)


def test_no_hand_kept_offset_tables():
    """C code reaches fields through offsetof/sizeof of the header's structs, Python
    through the dtypes built from it: no `#define OFF_x 12`, no `row + 24`, no
    {"start": 24} or ("start", "u8") of a record field outside the header."""
    fields = "|".join((*TEN, "keypoint", "modelId", "threadId", "devId", "executionTime"))
    bad = []
    for path in _sources("aclprof/**/*.[ch]"):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"#define\s+(OFF|REC|ROW|ACLPROF_OP_ROW|ACLPROF_WIRE)_\w*\s+\d", line) or \
                    re.search(r"\b(rec|row|src|dst)\s*\+\s*\d+\b", line):
                bad.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    for path in _sources("aclprof/**/*.py", "daemon/aclprofd/*.py"):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(rf"""["']({fields})["']\s*(:\s*\d+|,\s*["'][<>=|]?[uif][1248]["'])""", line):
                bad.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_jsonl_refuses_to_build_with_a_field_it_does_not_list(tmp_path: Path):
    """The daemon's encoder lists the wire record's fields for RECORD_FIELDS; a field added
    to the header and not to that list, or one that changes protocol 1's 56 bytes, is a
    compile error, not a silently wrong RECORD_DTYPE."""
    src = REPO / "aclprof" / "protocol" / "_jsonl.c"
    # tmp_path first: its copy of the records header is the one found; cdefs/ for the others
    cmd = ["cc", "-fsyntax-only", "-std=c11", f"-I{sysconfig.get_paths()['include']}", f"-I{tmp_path}",
           f"-I{REPO / 'cdefs'}", str(src)]
    (tmp_path / "aclprof_records.h").write_text(HEADER.read_text(encoding="utf-8"), encoding="utf-8")
    subprocess.run(cmd, check=True, capture_output=True)  # the header as it is compiles
    (tmp_path / "aclprof_records.h").write_text(HEADER.read_text(encoding="utf-8").replace(
        "    uint64_t execution_time;\n", "    uint64_t execution_time;\n    uint64_t dummy;\n"),
        encoding="utf-8")
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode != 0
    assert "RECORD_FIELD_LIST must name every field" in out.stderr
    assert "new field needs a new protocol version" in out.stderr
