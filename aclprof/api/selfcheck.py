"""The library self-check behind ``aclprof doctor --check`` (issue 22, "For the first user
with an NPU"): one run that says which CANN is installed and which file gave each function
group, runs a short profiling session and, given a model, a short subscription with the
layout self-check, the clock calibration and the record rate; the result is a
:class:`CheckReport` that renders as JSON and as text for an issue report.

Callable in-process too, where a model loaded by the application can be named by id (model
ids belong to their process) and ``run`` executes it with the application's own inputs::

    from aclprof.api.selfcheck import run_check
    report = run_check(model_id=my_model, run=lambda: my_infer(), device=0)
    report.write("aclprof-check.json")
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CheckReport", "Step", "cann_version", "run_check"]

#: Files a CANN install keeps its version in, relative to lib64's parent and grandparent.
_VERSION_FILES = ("version.info", "version.cfg", "ascend_toolkit_install.info",
                  "runtime/version.info", "compiler/version.info")
_VERSION_LINE = re.compile(r"^\s*(?:version|Version|VERSION|runtime_running_version)\s*=\s*\[?([^\]:\s]+)", re.M)


@dataclass
class Step:
    """One check: ``ok`` is True (passed), False (failed) or None (not decided: no model given,
    version unknown); ``detail`` is one line for the text report, ``data`` the numbers."""

    name: str
    ok: bool | None
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckReport:
    """Every step, in order, and the facts of the machine."""

    steps: list[Step] = field(default_factory=list)
    machine: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no step failed."""
        return all(s.ok is not False for s in self.steps)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "machine": self.machine, "steps": [asdict(s) for s in self.steps]}

    def text(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "--  "}
        lines = [f"aclprof self-check: {'passed' if self.ok else 'FAILED'}"]
        lines += [f"  {k}: {v}" for k, v in self.machine.items()]
        for s in self.steps:
            lines.append(f"[{mark[s.ok]}] {s.name}: {s.detail}")
            for group in s.data.get("groups", ()):
                files = ", ".join(group["files"]) or "none"
                missing = f"; missing {', '.join(group['missing'])}" if group["missing"] else ""
                lines.append(f"         {group['group']}: {group['found']} from {files}{missing}")
        return "\n".join(lines) + "\n"

    def write(self, path: str | os.PathLike[str]) -> tuple[Path, Path]:
        """Write the JSON to ``path`` and the text beside it (``.txt``); returns both paths."""
        json_path = Path(path)
        text_path = json_path.with_suffix(".txt")
        json_path.write_text(json.dumps(self.as_dict(), indent=2) + "\n", encoding="utf-8")
        text_path.write_text(self.text(), encoding="utf-8")
        return json_path, text_path


def cann_version(library_path: str) -> tuple[str | None, str | None]:
    """(version, the file it came from) from the install around ``library_path``'s lib64, or
    (None, None) when no version file is there."""
    lib64 = Path(library_path).resolve().parent
    for root in (lib64.parent, lib64.parent.parent):
        for name in _VERSION_FILES:
            candidate = root / name
            try:
                text = candidate.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            match = _VERSION_LINE.search(text)
            if match:
                return match.group(1), str(candidate)
    return None, None


def _rss_kib() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _library_steps(report: CheckReport) -> Any:
    """The library, its version and groups; returns library_info() or None when none loads."""
    from aclprof.binding.loader import get_library, library_info

    try:
        info = library_info()
    except Exception as exc:  # LibraryNotFoundError / LibraryDependencyError: the fix is in the text
        report.steps.append(Step("library", False, str(exc).replace("\n", " ")))
        return None
    report.steps.append(Step("library", True, f"{info.name} at {info.path}" + (" (mock)" if info.is_mock else ""),
                             {"path": info.path, "is_mock": info.is_mock, "op_desc_size": info.op_desc_size,
                              "model_library": info.model_library}))
    if info.is_mock:
        mock_version = f"mock (aclmockVersion {get_library().fn('aclmockVersion')()})"
        report.steps.append(Step("CANN version", True, mock_version, {"version": mock_version}))
    else:
        version, source = cann_version(info.path)
        report.steps.append(Step("CANN version", None if version is None else True,
                                 f"{version} (from {source})" if version else
                                 "unknown: no version file near the library's lib64",
                                 {"version": version, "source": source}))
    groups = [{"group": g.group, "files": list(g.files), "found": g.found, "missing": list(g.missing)}
              for g in info.groups]
    core_missing = [m for g in info.groups if g.group in ("session", "op-desc getters") for m in g.missing]
    report.steps.append(Step("symbol groups", not core_missing,
                             f"{len(groups)} groups; missing: {', '.join(core_missing) or 'none'} (session, getters)",
                             {"groups": groups, "missing_symbols": list(info.missing_symbols)}))
    return info


def _session_step(report: CheckReport, device: int) -> None:
    """aclprofInit, Start(ACL_API on ``device``), Stop, Finalize into a temporary directory."""
    from aclprof.binding import lowlevel as ll
    from aclprof.binding.enums import AicoreMetrics, DataType

    data: dict[str, Any] = {"device": device, "rss_kib_before_init": _rss_kib()}
    with tempfile.TemporaryDirectory(prefix="aclprof-check-") as out:
        t0 = time.monotonic()
        try:
            ll.init(out)
            data["rss_kib_after_init"] = _rss_kib()
            config = ll.create_config([device], int(AicoreMetrics.NONE), int(DataType.ACL_API))
            try:
                ll.start(config)
                ll.stop(config)
            finally:
                ll.destroy_config(config)
                ll.finalize()
        except Exception as exc:
            report.steps.append(Step("profiling session", False, f"{type(exc).__name__}: {exc}", data))
            return
        data["seconds"] = round(time.monotonic() - t0, 4)
        data["files_written"] = sum(len(files) for _, _, files in os.walk(out))
    report.steps.append(Step("profiling session", True,
                             f"Init/Start/Stop/Finalize on device {device} in {data['seconds']} s, "
                             f"{data['files_written']} files written", data))


def _subscription_step(report: CheckReport, device: int, model_id: int | None, model_file: str | None,
                       run: Callable[[], Any] | None, executions: int, timeout: float) -> None:
    from aclprof.api.subscription import subscribe
    from aclprof.binding import lowlevel as ll

    if model_id is None and model_file is None:
        report.steps.append(Step("subscription", None, "skipped: no model named (--model FILE.om, or "
                                 "run_check(model_id=..., run=...) in your process)"))
        return
    loaded = None
    data: dict[str, Any] = {"device": device}
    arrivals: list[tuple[int, int, int]] = []  # (host ns at arrival, newest end, records)
    lock = threading.Lock()

    def on_batch(batch: Any) -> None:
        now = time.monotonic_ns()
        ops = batch.data[~batch.data["keypoint"]]
        if len(ops):
            with lock:
                arrivals.append((now, int(ops["end"].max()), len(ops)))

    try:
        if model_id is None:
            loaded = model_id = ll.mdl_load_from_file(str(model_file))
        data["model_id"] = model_id
        sub = subscribe(model_id, batch_callback=on_batch, device=device)
        t0 = time.monotonic()
        try:
            if run is not None:
                run()
            else:
                with ll.mdl_create_dataset() as inputs, ll.mdl_create_dataset() as outputs:
                    for _ in range(executions):
                        ll.mdl_execute(model_id, inputs, outputs)
        finally:
            sub.close(timeout=timeout)
        elapsed = time.monotonic() - t0
        st = sub.stats
    except Exception as exc:
        hint = ("" if run is not None else
                "; a model that needs inputs cannot run with empty datasets: call "
                "aclprof.api.selfcheck.run_check(model_id=..., run=...) from your process")
        report.steps.append(Step("subscription", False, f"{type(exc).__name__}: {exc}{hint}", data))
        return
    finally:
        if loaded is not None:
            try:
                ll.mdl_unload(loaded)
            except Exception as exc:
                data["unload_error"] = str(exc)
    records = sum(n for _, _, n in arrivals)
    gaps = [host - end for host, end, _ in arrivals]
    data.update(records=records, delivered=st.delivered, records_read=st.records_read,
                dropped=st.dropped_queue_full + st.dropped_corrupt + st.dropped_decode_error,
                layout_mismatch=st.layout_mismatch, decoded_by_getters=st.records_decoded_by_getters,
                names_missing=st.names_missing, seconds=round(elapsed, 4),
                records_per_second=round(records / elapsed) if elapsed > 0 else None,
                # host CLOCK_MONOTONIC at arrival minus the record's end: the smallest is the
                # calibrated offset the lag uses (device clock vs host, audit row 11)
                clock_offset_ns_min=min(gaps) if gaps else None, clock_offset_ns_max=max(gaps) if gaps else None)
    ok = records > 0 and not st.layout_mismatch and data["dropped"] == 0
    why = ("no op record arrived" if records == 0 else
           "the record layout differs from the library's getters" if st.layout_mismatch else
           f"{data['dropped']} records dropped" if data["dropped"] else "")
    report.steps.append(Step(
        "subscription", ok,
        (f"{records} records in {data['seconds']} s ({data['records_per_second']}/s); layout "
         f"{'MISMATCH' if st.layout_mismatch else 'matches the getters'}; clock offset (host - device) "
         f"{data['clock_offset_ns_min']} ns" + (f"; {why}" if why else "")), data))


def run_check(*, device: int = 0, model_id: int | None = None, model_file: str | os.PathLike[str] | None = None,
              run: Callable[[], Any] | None = None, executions: int = 20, timeout: float = 10.0) -> CheckReport:
    """Run every check (see the module docstring); never raises for a failing check: the
    report says what failed and why. ``model_file`` is loaded (and unloaded) when no
    ``model_id`` is given; without ``run`` the model is executed ``executions`` times with
    empty datasets."""
    if model_id is not None and model_file is not None:
        raise ValueError("run_check: name a model_id or a model_file, not both")
    if executions < 1:
        raise ValueError(f"run_check: executions must be >= 1, got {executions}")
    report = CheckReport(machine={
        "host": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **{k: os.environ[k] for k in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH",
                                      "ACLPROF_LIBRARY", "ACLPROF_BACKEND") if k in os.environ}})
    if _library_steps(report) is None:
        return report
    acl_up = _runtime_up(report, device)
    try:
        _session_step(report, device)
        _subscription_step(report, device, model_id, None if model_file is None else os.fspath(model_file),
                           run, executions, timeout)
    finally:
        if acl_up:
            _runtime_down(device)
    return report


def _runtime_up(report: CheckReport, device: int) -> bool:
    """aclInit and aclrtSetDevice (what an application does first); True when this check did
    aclInit itself (and so finalizes it). An application that already called aclInit gets
    100002 here, which is fine."""
    from aclprof.binding import lowlevel as ll
    from aclprof.binding.errors import RepeatInitializeError, UnsupportedError

    mine = True
    try:
        ll.acl_init()
    except RepeatInitializeError:
        mine = False
    except UnsupportedError as exc:
        report.steps.append(Step("runtime", None, f"no aclInit ({exc}); profiling without it"))
        return False
    except Exception as exc:
        report.steps.append(Step("runtime", False, f"aclInit: {type(exc).__name__}: {exc}"))
        return False
    try:
        ll.rt_set_device(device)
    except Exception as exc:
        report.steps.append(Step("runtime", False, f"aclrtSetDevice({device}): {type(exc).__name__}: {exc}"))
        return mine
    report.steps.append(Step("runtime", True, f"aclInit {'done' if mine else '(already)'}, device {device} set"))
    return mine


def _runtime_down(device: int) -> None:
    from aclprof.binding import lowlevel as ll

    def reset() -> None:
        ll.rt_reset_device(device)

    for step in (reset, ll.acl_finalize):
        try:
            step()
        except Exception:
            pass  # the report is written; a teardown error changes nothing in it
