"""The Python enums mirror the C declarations exactly, and data-type masks are validated in
Python (unknown bits rejected and listed) before any C call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import aclprof
from aclprof import AicoreMetrics, ConfigType, DataType, OpFlag, StepTag
from aclprof.binding import errors
from aclprof.binding.enums import validate_data_types
from aclprof.binding.loader import get_library

CDEFS = Path(__file__).resolve().parent.parent / "cdefs"

KNOWN_BITS = 0
for _m in DataType:
    KNOWN_BITS |= int(_m)


def _constants():
    return get_library().constants


def _c_enum(type_name: str) -> dict[str, int]:
    """name -> value of a C enum, as cffi parsed it from cdefs/."""
    return dict(get_library().ffi.typeof(type_name).relements)


def test_datatype_members_equal_the_c_macros():
    header = (CDEFS / "acl_prof.h").read_text()
    macros = dict(re.findall(r"#define ACL_PROF_(\w+) (0x[0-9A-Fa-f]+)ULL", header))
    assert macros, "no ACL_PROF_* bit macros found in cdefs/acl_prof.h"
    # Exactly the bits of the header, no more, no fewer.
    assert {m.name for m in DataType} == set(macros)
    for member in DataType:
        assert int(member) == int(macros[member.name], 16)
        assert int(member) == getattr(_constants(), "ACL_PROF_" + member.name)
        assert bin(int(member)).count("1") == 1


@pytest.mark.parametrize("enum_cls, c_type, prefix, skip", [
    (AicoreMetrics, "aclprofAicoreMetrics", "ACL_AICORE_", ()),
    (ConfigType, "aclprofConfigType", "ACL_PROF_", ("ARGS_MIN", "ARGS_MAX")),
    (OpFlag, "aclprofSubscribeOpFlag", "ACL_SUBSCRIBE_", ()),
    (StepTag, "aclprofStepTag", "ACL_STEP_", ()),
])
def test_int_enums_equal_the_c_enums(enum_cls, c_type, prefix, skip):
    c_values = {name[len(prefix):]: value for name, value in _c_enum(c_type).items()}
    for name in skip:
        c_values.pop(name)
    assert {m.name: int(m) for m in enum_cls} == c_values
    for member in enum_cls:
        assert int(member) == getattr(_constants(), prefix + member.name)


def test_config_type_bounds_match_c():
    # aclprofSetConfig rejects type <= ARGS_MIN and >= ARGS_MAX: every member lies inside.
    assert all(_constants().ACL_PROF_ARGS_MIN < m < _constants().ACL_PROF_ARGS_MAX for m in ConfigType)


def test_error_code_table_matches_acl_base_h():
    # acl_runtime.h adds the GE codes aclmdlExecute passes through.
    header = (CDEFS / "acl_base.h").read_text() + (CDEFS / "acl_runtime.h").read_text()
    defined = {name: int(value) for name, value in re.findall(r"#define (ACL_\w+) (-?\d+)", header)}
    table = dict(errors._CODE_NAMES)
    # Every aclError of the header is in the table under its own name ...
    for name, value in defined.items():
        if name == "ACL_ERROR_NONE":  # an alias of ACL_SUCCESS
            continue
        assert table.get(value) == name, f"{name}={value} missing from aclprof.binding.errors"
        assert getattr(_constants(), name) == value
    # ... and the table has nothing else but msproftx's -1.
    extra = {code: name for code, name in table.items() if name not in defined}
    assert extra == {-1: "PROFILING_FAILED"}


def test_error_classes_carry_the_header_codes():
    c = _constants()
    pairs = {
        aclprof.InvalidParamError: c.ACL_ERROR_INVALID_PARAM,
        aclprof.UninitializeError: c.ACL_ERROR_UNINITIALIZE,
        aclprof.RepeatInitializeError: c.ACL_ERROR_REPEAT_INITIALIZE,
        aclprof.InvalidFileError: c.ACL_ERROR_INVALID_FILE,
        aclprof.InvalidProfilingConfigError: c.ACL_ERROR_INVALID_PROFILING_CONFIG,
        aclprof.InvalidModelIdError: c.ACL_ERROR_INVALID_MODEL_ID,
        aclprof.ProfAlreadyRunError: c.ACL_ERROR_PROF_ALREADY_RUN,
        aclprof.ProfNotRunError: c.ACL_ERROR_PROF_NOT_RUN,
        aclprof.RepeatSubscribeError: c.ACL_ERROR_PROF_REPEAT_SUBSCRIBE,
        aclprof.ApiConflictError: c.ACL_ERROR_PROF_API_CONFLICT,
        aclprof.FeatureUnsupportedError: c.ACL_ERROR_FEATURE_UNSUPPORTED,
        aclprof.ModulesUnsupportedError: c.ACL_ERROR_PROF_MODULES_UNSUPPORTED,
        aclprof.ProfilingFailureError: c.ACL_ERROR_PROFILING_FAILURE,
        aclprof.UnsupportedError: c.ACL_ERROR_API_NOT_SUPPORT,
    }
    for cls, value in pairs.items():
        assert cls.code == value, cls.__name__


# ---- validate_data_types ------------------------------------------------------------------

_known_masks = st.sets(st.sampled_from(list(DataType)), min_size=1).map(lambda ms: sum(int(m) for m in ms))
_masks = st.one_of(
    st.integers(min_value=0, max_value=2**64 - 1),                      # mostly unknown bits
    _known_masks,                                                        # only known bits
    st.tuples(_known_masks, st.integers(min_value=0, max_value=63)).map(  # known | one more
        lambda t: t[0] | (1 << t[1])),
)


@given(_masks)
def test_validate_accepts_exactly_masks_of_known_bits(mask):
    unknown = mask & ~KNOWN_BITS
    if mask != 0 and not unknown:
        result = validate_data_types(mask)
        assert isinstance(result, DataType) and int(result) == mask
        return
    with pytest.raises(ValueError) as info:
        validate_data_types(mask)
    if mask == 0:
        assert "at least one" in str(info.value)
        return
    text = str(info.value)
    listed = {int(h, 16) for h in re.findall(r"0x[0-9a-f]+", text.split(":", 1)[1].split(";")[0])}
    assert listed == {1 << i for i in range(64) if unknown >> i & 1}


@given(st.sets(st.sampled_from(list(DataType)), min_size=1))
def test_validate_accepts_any_union_of_members(members):
    mask = 0
    for m in members:
        mask |= m
    assert validate_data_types(mask) == mask
    assert validate_data_types(DataType(mask)) == mask


@given(st.integers(min_value=2**64, max_value=2**70) | st.integers(max_value=-1))
def test_validate_rejects_out_of_uint64(mask):
    with pytest.raises(ValueError):
        validate_data_types(mask)


@pytest.mark.parametrize("bad", [True, 1.0, "1", None, b"\x01"])
def test_validate_rejects_non_ints(bad):
    with pytest.raises(TypeError):
        validate_data_types(bad)


def test_unused_bit_0x400_is_rejected_with_its_value():
    with pytest.raises(ValueError, match=r"0x400\b"):
        validate_data_types(DataType.ACL_API | 0x400)
