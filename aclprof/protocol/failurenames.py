"""Names for the numbers of an OP_FAILURE (issue 24), for readers that do not load the
binding (the CLI, the daemon): the error codes of an AI Core exception and the
``aclDataType``/``aclFormat`` enumerators of a tensor description (cdefs/acl_runtime.h).
Kept in step with the binding's tables by tests/test_failure_stream.py."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["FAILURE_CODES", "DTYPES", "FORMATS", "failure_code_name", "tensor_text"]

#: the runtime codes an AI Core exception returns from execute or synchronize (acl_runtime.h)
FAILURE_CODES: dict[int, str] = {
    107000: "ACL_ERROR_RT_PARAM_INVALID",
    507011: "ACL_ERROR_RT_MODEL_EXECUTE",
    507014: "ACL_ERROR_RT_AICORE_TIMEOUT",
    507015: "ACL_ERROR_RT_AICORE_EXCEPTION",
    507016: "ACL_ERROR_RT_AICORE_TRAP_EXCEPTION",
}

DTYPES: dict[int, str] = {
    -1: "ACL_DT_UNDEFINED",
    0: "ACL_FLOAT",
    1: "ACL_FLOAT16",
    2: "ACL_INT8",
    3: "ACL_INT32",
    4: "ACL_UINT8",
    6: "ACL_INT16",
    7: "ACL_UINT16",
    8: "ACL_UINT32",
    9: "ACL_INT64",
    10: "ACL_UINT64",
    11: "ACL_DOUBLE",
    12: "ACL_BOOL",
    13: "ACL_STRING",
    16: "ACL_COMPLEX64",
    17: "ACL_COMPLEX128",
    27: "ACL_BF16",
    29: "ACL_INT4",
    30: "ACL_UINT1",
    33: "ACL_COMPLEX32",
    34: "ACL_HIFLOAT8",
    35: "ACL_FLOAT8_E5M2",
    36: "ACL_FLOAT8_E4M3FN",
    37: "ACL_FLOAT8_E8M0",
    38: "ACL_FLOAT6_E3M2",
    39: "ACL_FLOAT6_E2M3",
    40: "ACL_FLOAT4_E2M1",
    41: "ACL_FLOAT4_E1M2",
}

FORMATS: dict[int, str] = {
    -1: "ACL_FORMAT_UNDEFINED",
    0: "ACL_FORMAT_NCHW",
    1: "ACL_FORMAT_NHWC",
    2: "ACL_FORMAT_ND",
    3: "ACL_FORMAT_NC1HWC0",
    4: "ACL_FORMAT_FRACTAL_Z",
    12: "ACL_FORMAT_NC1HWC0_C04",
    16: "ACL_FORMAT_HWCN",
    27: "ACL_FORMAT_NDHWC",
    29: "ACL_FORMAT_FRACTAL_NZ",
    30: "ACL_FORMAT_NCDHW",
    32: "ACL_FORMAT_NDC1HWC0",
    33: "ACL_FRACTAL_Z_3D",
    35: "ACL_FORMAT_NC",
    47: "ACL_FORMAT_NCL",
}


def failure_code_name(code: object) -> str:
    """``"ACL_ERROR_RT_AICORE_EXCEPTION"`` for 507015; ``"UNKNOWN"`` for a code not listed."""
    return FAILURE_CODES.get(code, "UNKNOWN") if isinstance(code, int) else "UNKNOWN"


def tensor_text(t: object) -> str:
    """A tensor of a failure (``{"dtype", "format", "shape"}``) in a few characters:
    ``float16[8x4x112x112x16] NC1HWC0``; ``?`` for an unknown rank, ``scalar`` for rank 0."""
    if not isinstance(t, dict):
        return "?"
    dtype, fmt, shape = t.get("dtype"), t.get("format"), t.get("shape")
    dn = DTYPES.get(dtype, str(dtype)) if isinstance(dtype, int) else "?"
    fn = FORMATS.get(fmt, str(fmt)) if isinstance(fmt, int) else "?"
    dn = dn.removeprefix("ACL_").lower()
    fn = fn.removeprefix("ACL_FORMAT_").removeprefix("ACL_")
    if isinstance(shape, Sequence) and not isinstance(shape, str):
        dims = "x".join(str(d) for d in shape) or "scalar"
    else:
        dims = "?"
    return f"{dn}[{dims}] {fn}"
