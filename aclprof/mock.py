"""Controls of the bundled mock library (``mock_acl/``), for tests and the demo.

Every function here calls an ``aclmock*`` export, so it requires the mock backend
(``ACLPROF_BACKEND=mock`` or :func:`aclprof.use_mock`); against real CANN it raises
:class:`RuntimeError` instead of doing anything.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from aclprof.binding import lowlevel, mockctl, opfailure
from aclprof.binding import state as _state
from aclprof.binding.loader import get_library

__all__ = [
    "reset", "mode", "stats", "fail_next", "clear_faults", "set_device_count",
    "set_cann_era", "set_op_desc_size", "set_time_unit", "set_realtime",
    "set_write_chunk", "set_corrupt_every", "set_writer_delay_us", "set_emit_log",
    "wait_writer_idle", "model_file", "load_model", "execute", "unload",
    "set_helper_host",
    "set_device_clock_offset", "set_device_clock_drift", "set_stamp_thread",
    "set_devid_zero", "set_step_keypoints", "KEYPOINT_MODEL_CANN",
    "set_op_desc_layout", "set_chip", "set_unsubscribe_policy",
    "inject_op_failure", "clear_op_failure", "set_exception_thread", "set_failed_op_record",
]

_MODES = {0: "OFF", 1: "API_CTRL", 2: "SUBSCRIBE"}


def _call(name: str, *args: Any) -> Any:
    return mockctl.call(name, *args)


def _ok(rc: int, name: str) -> None:
    if rc != 0:
        raise ValueError(f"{name} rejected its argument (code {rc})")


def _choice(value: str, choices: dict[str, int], what: str) -> int:
    try:
        return choices[value]
    except (KeyError, TypeError):
        raise ValueError(f"{what} must be one of {sorted(choices)}, got {value!r}") from None


def reset() -> None:
    """Return the mock to its freshly loaded state (sessions, models, stamps, faults)."""
    _state.tx_stopping()  # aclprof's cached stamps die with the mock's pool
    _call("aclmockReset")
    opfailure.library_reset()  # the reset forgot the exception callback: install it again


def mode() -> str:
    """The mock's global profiling mode: ``"OFF"``, ``"API_CTRL"`` or ``"SUBSCRIBE"``."""
    return _MODES[_call("aclmockGetMode")]


def stats() -> dict[str, int]:
    """The mock's counters (records emitted/written/dropped, name table size, stamps...)."""
    rc, counters = mockctl.stats()
    _ok(rc, "aclmockGetStats")
    return counters


def fail_next(function: str, times: int = 1, code: int = 500005) -> None:
    """Make the next ``times`` calls of the C function ``function`` return ``code``."""
    _ok(_call("aclmockFailNext", function.encode(), times, code), "aclmockFailNext")


def clear_faults() -> None:
    """Disarm every injected fault."""
    _call("aclmockClearFaults")


def set_device_count(count: int) -> None:
    """Number of devices the mock driver reports (1..64; default 8)."""
    _ok(_call("aclmockSetDeviceCount", count), "aclmockSetDeviceCount")


def set_cann_era(era: int | str) -> None:
    """Which CANN release the session calls follow: ``2025`` (hicann/runtime d8beaaf09) or
    ``2026`` (681ef7610, the default). See the table in :mod:`aclprof.binding.lowlevel`."""
    value = _choice(str(era), {"2025": 2025, "2026": 2026}, "era")
    _ok(_call("aclmockSetCannEra", value), "aclmockSetCannEra")


def set_op_desc_size(size: int) -> None:
    """Op record size: 80 (current CANN) or 72 (older CANN, no devId)."""
    _ok(_call("aclmockSetOpDescSize", size), "aclmockSetOpDescSize")


def set_time_unit(unit: str) -> None:
    """Unit of op timestamps: ``"ns"`` or ``"us"``."""
    _ok(_call("aclmockSetTimeUnit", _choice(unit, {"ns": 0, "us": 1}, "unit")), "aclmockSetTimeUnit")


def set_realtime(enabled: bool) -> None:
    """If true, ``aclmdlExecute`` takes the simulated time; else it returns at once."""
    _ok(_call("aclmockSetRealtime", int(bool(enabled))), "aclmockSetRealtime")


def set_write_chunk(nbytes: int) -> None:
    """Split each record into writes of ``nbytes`` (0: one write per record, as CANN)."""
    _ok(_call("aclmockSetWriteChunk", nbytes), "aclmockSetWriteChunk")


def set_corrupt_every(k: int) -> None:
    """Give every k-th record a bad signature (0: never)."""
    _ok(_call("aclmockSetCorruptEvery", k), "aclmockSetCorruptEvery")


def set_writer_delay_us(us: int) -> None:
    """Make the pipe writer sleep this long before each record."""
    _ok(_call("aclmockSetWriterDelayUs", us), "aclmockSetWriterDelayUs")


def set_emit_log(path: str | os.PathLike[str] | None) -> None:
    """Log every emitted record to ``path`` (None stops); see mock_acl/README.md."""
    arg = None if path is None else os.fsencode(path)
    _ok(_call("aclmockSetEmitLog", arg), "aclmockSetEmitLog")


def wait_writer_idle(timeout: float = 10.0) -> None:
    """Block until the mock's pipe writer has written (or dropped) everything queued."""
    rc = _call("aclmockWaitWriterIdle", max(1, int(timeout * 1000)))
    if rc != 0:
        raise TimeoutError(f"the mock's pipe writer is still busy after {timeout:.1f}s")


def set_helper_host(enabled: bool) -> None:
    """If true, every ``aclprof*`` call fails as on a CANN helper host: 200006, which the op
    time getters return as their value (audit section 4 item 4). Env ``ACLMOCK_HELPER_HOST=1``."""
    _ok(_call("aclmockSetHelperHost", int(bool(enabled))), "aclmockSetHelperHost")


def set_chip(chip: str) -> None:
    """Which ``aclprofSetConfig`` types the mock's chip supports (fidelity audit 3, row 7b):
    ``"910b"`` (the default, as CANN on an Ascend 910B: types 11, 13, 14 give 100010 and 15
    gives 100000 whatever the value) or ``"any"`` (every type; no real chip). Env
    ``ACLMOCK_CHIP``."""
    _ok(_call("aclmockSetChip", _choice(chip, {"910b": 0, "any": 1}, "chip")), "aclmockSetChip")


def set_unsubscribe_policy(policy: str) -> None:
    """What ``aclprofModelUnSubscribe`` does with records still queued for the fd (fidelity
    audit 3, row 1b): ``"drain"`` (the default: written before the close) or ``"drop"`` (as
    CANN: dropped, counted in ``recordsDroppedAtUnsubscribe``). Env ``ACLMOCK_UNSUBSCRIBE``."""
    value = _choice(policy, {"drain": 0, "drop": 1}, "policy")
    _ok(_call("aclmockSetUnsubscribePolicy", value), "aclmockSetUnsubscribePolicy")


# --- model runtime -------------------------------------------------------------------------

_OP_KEYS = {"name", "type", "duration_ns", "jitter", "flag", "thread_id", "inputs", "outputs"}
_TENSOR_KEYS = {"dtype", "format", "shape"}


def _int32(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -2**31 <= value < 2**31:
        raise ValueError(f"{what} must be an int32 (an aclDataType/aclFormat value), got {value!r}")
    return value


def _tensor_lines(kind: str, tensors: Any, where: str) -> list[str]:
    """The model file's ``in``/``out`` lines of one op (README: "Model description files")."""
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{where} {kind}puts must be a list of dicts, not {type(tensors).__name__}")
    lines = []
    for k, t in enumerate(tensors):
        what = f"{where} {kind}put {k}"
        if not isinstance(t, Mapping) or set(t) - _TENSOR_KEYS or "shape" not in t:
            raise ValueError(f"{what} must be a dict with keys dtype, format, shape, got {t!r}")
        shape = t["shape"]
        if not isinstance(shape, (list, tuple)) or len(shape) > 128 or any(
                isinstance(d, bool) or not isinstance(d, int) or not -2 <= d < 2**63 for d in shape):
            raise ValueError(f"{what} shape must be a list of at most 128 ints >= -2 (-1 unknown "
                             f"dimension, [-2] unknown rank), got {shape!r}")
        lines.append("\t".join([kind, str(_int32(t.get("dtype", 0), f"{what} dtype")),
                                 str(_int32(t.get("format", 2), f"{what} format")),
                                 ",".join(str(d) for d in shape)]))
    return lines


def _escape(value: Any, what: str) -> str:
    data = value.encode("utf-8") if isinstance(value, str) else value
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")
    if b"\0" in data:
        raise ValueError(f"{what} must not contain NUL bytes (the API returns C strings)")
    out = []
    for byte in data:
        if byte == 0x5C:
            out.append("\\\\")
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")
    return "".join(out)


def _natural(value: Any, what: str, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
        raise ValueError(f"{what} must be an int in [0, {hi}], got {value!r}")
    return value


def model_file(ops: Iterable[Mapping[str, Any]], path: str | os.PathLike[str], *, device: int = 0,
               seed: int | None = None) -> None:
    """Write the model description that the mock's ``aclmdlLoadFromFile`` reads.

    ``ops`` is a list of dicts with keys ``name``, ``type`` (str or bytes; any bytes but
    NUL), ``duration_ns`` and optionally ``jitter`` (ns, uniform +/-), ``flag``,
    ``thread_id``, and ``inputs``/``outputs``: lists of ``{"dtype": aclDataType value,
    "format": aclFormat value (default 2, ND), "shape": [dims]}``, what
    ``aclmdlCreateAndGetOpDesc`` describes after an AI Core exception. The format is
    documented in mock_acl/README.md.
    """
    lines = ["aclmock-model 1", f"device {_natural(device, 'device', 63)}"]
    if seed is not None:
        lines.append(f"seed {_natural(seed, 'seed', 2**64 - 1)}")
    count = 0
    for i, op in enumerate(ops):
        if not isinstance(op, Mapping):
            raise TypeError(f"op {i} must be a mapping, not {type(op).__name__}")
        unknown = set(op) - _OP_KEYS
        if unknown or not {"name", "type", "duration_ns"} <= set(op):
            raise ValueError(f"op {i} needs keys name, type, duration_ns (optional jitter, flag, "
                             f"thread_id); unknown: {sorted(unknown)}")
        fields = ["op", _escape(op["name"], f"op {i} name"), _escape(op["type"], f"op {i} type"),
                  str(_natural(op["duration_ns"], f"op {i} duration_ns", 10**12)),
                  str(_natural(op.get("jitter", 0), f"op {i} jitter", 10**12)),
                  str(_natural(op.get("flag", 0), f"op {i} flag", 2**32 - 1)),
                  str(_natural(op.get("thread_id", 0), f"op {i} thread_id", 2**32 - 1))]
        lines.append("\t".join(fields))
        lines += _tensor_lines("in", op.get("inputs", []), f"op {i}")
        lines += _tensor_lines("out", op.get("outputs", []), f"op {i}")
        count += 1
    if count == 0:
        raise ValueError("a model needs at least one op")
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


def load_model(ops: Iterable[Mapping[str, Any]], *, device: int = 0, seed: int | None = None) -> int:
    """Describe a model with ``ops`` (see :func:`model_file`), load it, return its id."""
    get_library()
    fd, path = tempfile.mkstemp(prefix="aclmock-model-", suffix=".txt")
    os.close(fd)
    try:
        model_file(ops, path, device=device, seed=seed)
        return lowlevel.mdl_load_from_file(path)
    finally:
        os.unlink(path)


def execute(model_id: int, iterations: int = 1) -> None:
    """Run the model ``iterations`` times (``aclmdlExecute``).

    The mock's models have no inputs or outputs, so each call gets two empty datasets,
    created once and destroyed afterwards (CANN rejects NULL datasets).
    """
    _natural(iterations, "iterations", 2**31)
    with lowlevel.mdl_create_dataset() as inputs, lowlevel.mdl_create_dataset() as outputs:
        for _ in range(iterations):
            lowlevel.mdl_execute(model_id, inputs, outputs)


def unload(model_id: int) -> None:
    """``aclmdlUnload``."""
    lowlevel.mdl_unload(model_id)


# --- what the op records mean (audit rows 11-13) -------------------------------------------

#: The model id CANN stamps on step keypoint records (no subscription can match it).
KEYPOINT_MODEL_CANN = 0xFFFFFFFF


def set_device_clock_offset(offset_ns: int) -> None:
    """Report record times on a device clock ``offset_ns`` away from the host's
    ``CLOCK_MONOTONIC`` (0: the same clock). Rejected if the device time would be negative."""
    if isinstance(offset_ns, bool) or not isinstance(offset_ns, int) or not -2**63 <= offset_ns < 2**63:
        raise ValueError(f"offset_ns must be an int64, got {offset_ns!r}")
    _ok(_call("aclmockSetDeviceClockOffset", offset_ns), "aclmockSetDeviceClockOffset")


def set_device_clock_drift(ppm: float) -> None:
    """Make the device clock gain ``ppm`` parts per million against the host's (negative:
    lose), from now on, without a jump; ``|ppm| <= 1000``. Real device counters drift a
    few ppm to tens of ppm against CLOCK_MONOTONIC; request attribution (issue 25) has to
    follow it."""
    if isinstance(ppm, bool) or not isinstance(ppm, (int, float)) or not -1000 <= ppm <= 1000:
        raise ValueError(f"set_device_clock_drift: ppm must be a number in [-1000, 1000], got {ppm!r}")
    _ok(_call("aclmockSetDeviceClockDrift", round(ppm * 1000)), "aclmockSetDeviceClockDrift")


def set_stamp_thread(enabled: bool) -> None:
    """Stamp each op record's ``threadId`` with the kernel tid (``threading.get_native_id()``)
    of the thread that executed the model, as CANN reports the launching host thread,
    instead of the model file's ``thread_id``."""
    _ok(_call("aclmockSetStampThread", int(bool(enabled))), "aclmockSetStampThread")


def set_devid_zero(enabled: bool) -> None:
    """Leave ``devId`` 0 in op records, as CANN's ``Analyzer::ConstructAndUploadData`` does."""
    _ok(_call("aclmockSetDevIdZero", int(bool(enabled))), "aclmockSetDevIdZero")


def set_step_keypoints(enabled: bool, model_id: int = KEYPOINT_MODEL_CANN) -> None:
    """Emit a ``keypoint_op``/``na`` record for each step that ends during a subscription,
    carrying (and routed by) ``model_id``. The default id is CANN's, which no subscription
    matches: the records are counted in ``stats()["keypointsUnrouted"]`` and dropped."""
    _natural(model_id, "model_id", 2**32 - 1)
    _ok(_call("aclmockSetStepKeypoints", int(bool(enabled)), model_id), "aclmockSetStepKeypoints")


def set_op_desc_layout(layout: str) -> None:
    """``"standard"`` (CANN's ``ProfOpDesc``) or ``"shuffled"``: same size, but modelId and
    the times at other offsets; the library's getters follow (audit row 14)."""
    value = _choice(layout, {"standard": 0, "shuffled": 1}, "layout")
    _ok(_call("aclmockSetOpDescLayout", value), "aclmockSetOpDescLayout")


# --- AI Core exceptions (issue 24) ------------------------------------------------------------

def inject_op_failure(model_id: int, op: str | int, *, every: int = 0, code: int = 507015,
                      execute_code: int = 500002) -> None:
    """Make op ``op`` (a name, or a position) of model ``model_id`` fail on the AI Core.

    ``every=0``: the next execution only; ``every=N``: every N-th execution from now. The
    exception callbacks get ``code`` (507015 ACL_ERROR_RT_AICORE_EXCEPTION by default) and
    ``aclmdlExecute`` returns ``execute_code`` (500002 ACL_ERROR_GE_FAILURE: what GE's
    synchronous execute makes of a failed stream). The ops before it run and are recorded;
    the failed op and those after it do not run (see :func:`set_failed_op_record`).

    Raises:
        ValueError: no such model or op, or a value out of range.
    """
    _natural(model_id, "model_id", 2**32 - 1)
    _natural(every, "every", 2**32 - 1)
    _natural(code, "code", 2**32 - 1)
    if isinstance(execute_code, bool) or not isinstance(execute_code, int) or not -2**31 <= execute_code < 2**31:
        raise ValueError(f"execute_code must be an int32, got {execute_code!r}")
    if isinstance(op, str):
        name, index = op.encode("utf-8"), 0
    else:
        name, index = None, _natural(op, "op", 2**32 - 1)
    if _call("aclmockInjectOpFailure", model_id, name, index, every, code, execute_code) != 0:
        raise ValueError(f"inject_op_failure: model {model_id} is not loaded or has no op {op!r}")


def clear_op_failure(model_id: int) -> None:
    """Disarm :func:`inject_op_failure` for ``model_id``; ValueError if it is not loaded."""
    if _call("aclmockClearOpFailure", _natural(model_id, "model_id", 2**32 - 1)) != 0:
        raise ValueError(f"clear_op_failure: model {model_id} is not loaded")


def set_exception_thread(which: str) -> None:
    """Where the exception callbacks run: ``"report"`` (a runtime thread, as CANN's task-report
    path; the default) or ``"caller"`` (the thread that called ``aclmdlExecute``)."""
    value = _choice(which, {"report": 0, "caller": 1}, "which")
    _ok(_call("aclmockSetExceptionThread", value), "aclmockSetExceptionThread")


def set_failed_op_record(emit: bool) -> None:
    """Whether the failed op's own record reaches a subscription (default: no)."""
    _ok(_call("aclmockSetFailedOpRecord", int(bool(emit))), "aclmockSetFailedOpRecord")
