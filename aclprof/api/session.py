"""``aclprof.Profiler``: one profiling session (init, config, options, start ... stop, finalize).

The C API is a process-wide state machine; a Profiler drives it through one full cycle and
guarantees the unwinding on every path: a failure half way through start undoes what was
done, and leaving the ``with`` block (normally or by an exception) stops, destroys the
config and finalizes, even when one of those steps fails.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from aclprof._log import get_logger
from aclprof.binding import lowlevel
from aclprof.binding.enums import AicoreMetrics, ConfigType, DataType, validate_data_types
from aclprof.binding.errors import ProfNotRunError

__all__ = ["Profiler", "validate_option"]

_log = get_logger(__name__)

def validate_option(config_type: Any, value: Any) -> tuple[ConfigType, str]:
    """Check one ``aclprofSetConfig`` option in Python and return it as (type, string).

    The rules are the library's (:func:`aclprof.binding.lowlevel.check_set_config_value`), after a
    little normalisation: integers may be given as int or decimal str (leading zeros and
    surrounding spaces are dropped), a bare ``STORAGE_LIMIT`` number gets its ``MB`` unit,
    and spaces around the words of ``HOST_SYS``/``HOST_SYS_USAGE`` lists are dropped.
    ``PATH`` is passed as given; ``""`` is accepted where the library accepts it.

    Raises:
        ValueError / TypeError: naming the option, the value and what is accepted.
    """
    try:
        ctype = ConfigType(config_type)
    except ValueError:
        raise ValueError(f"unknown ConfigType {config_type!r}; use an aclprof.ConfigType member") from None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"option {ctype.name} must be an int or str, not {type(value).__name__}")
    text = str(value) if ctype is ConfigType.PATH else str(value).strip()
    if ctype in lowlevel.SET_CONFIG_RANGES:
        lo, hi = lowlevel.SET_CONFIG_RANGES[ctype]
        if not text.isascii() or not text.isdecimal() or not lo <= int(text) <= hi:
            raise ValueError(f"option {ctype.name}={value!r} must be an integer in [{lo}, {hi}]")
        text = str(int(text))
    elif ctype is ConfigType.STORAGE_LIMIT and text:
        lo, hi = lowlevel.STORAGE_LIMIT_MB
        digits = text[:-2] if text.upper().endswith("MB") else text
        if not digits.isascii() or not digits.isdecimal() or not lo <= int(digits) <= hi:
            raise ValueError(f"option {ctype.name}={value!r} must be an integer in [{lo}, {hi}] "
                             "(MB, optionally with an 'MB' suffix), or '' for no limit")
        text = f"{int(digits)}MB"
    elif ctype in lowlevel.SET_CONFIG_WORD_LISTS and text:
        text = ",".join(w.strip() for w in text.split(","))
    data = lowlevel.encode_text(text, f"option {ctype.name}", lowlevel.MAX_CONFIG_VALUE_BYTES,
                                allow_empty=True)
    try:
        lowlevel.check_set_config_value(ctype, data)
    except ValueError as exc:
        raise ValueError(f"option {ctype.name}={value!r}: {exc}") from None
    return ctype, text


def _validate_output_dir(output_dir: Any) -> Path:
    if not isinstance(output_dir, (str, os.PathLike)):
        raise TypeError(f"output_dir must be a str or os.PathLike, not {type(output_dir).__name__}")
    path = Path(os.path.abspath(os.fspath(output_dir)))
    lowlevel.encode_text(os.fsencode(path), "output_dir", lowlevel.MAX_PATH_BYTES)
    bad = lowlevel.invalid_path_char(os.fsencode(path))
    if bad is not None:
        raise ValueError(f"output_dir {str(path)!r} contains {bad!r}, which aclprofInit refuses "
                         f"(100003); choose a directory without any of {lowlevel.INVALID_PATH_CHARS!r}")
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"output_dir {str(path)!r} exists and is not a directory")
    return path


def _validate_devices(devices: Any, data_types: DataType) -> tuple[int, ...]:
    if isinstance(devices, int) and not isinstance(devices, bool):
        devices = (devices,)
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Iterable):
        raise TypeError(f"devices must be an int or an iterable of ints, not {type(devices).__name__}")
    ids = tuple(devices)
    for d in ids:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"device ids must be ints, got {d!r}")
        if not 0 <= d < lowlevel.MAX_DEVICES:
            raise ValueError(f"device id {d} is out of range [0, {lowlevel.MAX_DEVICES - 1}]")
    if len(set(ids)) != len(ids):
        raise ValueError(f"devices contains duplicates: {list(ids)}")
    if not ids and not data_types & DataType.MSPROFTX:
        raise ValueError("devices may be empty only when data_types includes DataType.MSPROFTX")
    return ids


class Profiler:
    """A profiling session writing to ``output_dir``.

    ``with Profiler(dir, devices=(0,), data_types=DataType.ACL_API | DataType.MSPROFTX):``
    runs aclprofInit, aclprofCreateConfig, aclprofSetConfig for each option, and
    aclprofStart; leaving the block runs aclprofStop, aclprofDestroyConfig and
    aclprofFinalize, on every path. ``start()``/``stop()`` do the same explicitly, and a
    stopped Profiler can be started again. Everything is validated before any C call.

    Args:
        output_dir: where the library writes its ``PROF_*`` directories (created if needed).
        devices: device ids (an int is one device); empty only with ``DataType.MSPROFTX``.
        data_types: :class:`DataType` bits to collect.
        aicore_metrics: :class:`AicoreMetrics` (used with ``DataType.AICORE_METRICS``).
        options: ``{ConfigType: value}`` passed to aclprofSetConfig before start.
    """

    def __init__(
        self,
        output_dir: str | os.PathLike[str],
        devices: Iterable[int] | int = (0,),
        data_types: DataType | int = DataType.ACL_API | DataType.TASK_TIME,
        aicore_metrics: AicoreMetrics | int = AicoreMetrics.NONE,
        options: Mapping[ConfigType | int, Any] | None = None,
    ):
        self._output_dir = _validate_output_dir(output_dir)
        self._data_types = validate_data_types(data_types)
        self._devices = _validate_devices(devices, self._data_types)
        try:
            self._metrics = AicoreMetrics(aicore_metrics)
        except ValueError:
            raise ValueError(f"aicore_metrics {aicore_metrics!r} is not an AicoreMetrics value") from None
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options must be a mapping of ConfigType to value, not {type(options).__name__}")
        self._options = [validate_option(k, v) for k, v in (options or {}).items()]
        self._lock = threading.RLock()
        self._config: lowlevel.ProfConfig | None = None
        self._initialised = False
        self._running = False
        self._before: set[str] = set()
        self._result_dirs: list[Path] = []

    # -- properties -----------------------------------------------------------------------
    @property
    def output_dir(self) -> Path:
        """The absolute output directory given to aclprofInit."""
        return self._output_dir

    @property
    def result_dirs(self) -> list[Path]:
        """The ``PROF_*`` directories this Profiler's sessions produced, oldest first."""
        with self._lock:
            if self._running:
                self._collect_result_dirs()
            return list(self._result_dirs)

    @property
    def running(self) -> bool:
        return self._running

    @property
    def devices(self) -> tuple[int, ...]:
        return self._devices

    @property
    def data_types(self) -> DataType:
        return self._data_types

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Profiler:
        """Init, create the config, set the options and start. Undone on failure."""
        with self._lock:
            if self._running:
                raise RuntimeError("this Profiler is already running; stop() it first")
            if self._initialised:  # an earlier aclprofFinalize failed: finish it first
                self._unwind(stop=True)
            self._output_dir.mkdir(parents=True, exist_ok=True)
            self._before = self._prof_dirs()
            start_called = False
            try:
                lowlevel.init(self._output_dir)
                self._initialised = True
                self._config = lowlevel.create_config(self._devices, self._metrics, self._data_types)
                for ctype, text in self._options:
                    lowlevel.set_config(ctype, text)
                start_called = True
                lowlevel.start(self._config)
            except BaseException:
                self._unwind(stop=False, after_failed_start=start_called)
                raise
            self._running = True
            return self

    def stop(self) -> None:
        """Stop, destroy the config and finalize. Every step runs even if one fails; the
        first failure is raised afterwards. If aclprofFinalize failed earlier, it is retried
        (the library would otherwise stay initialised); else does nothing if not running."""
        with self._lock:
            if not self._running:
                if self._initialised:
                    self._unwind(stop=True)
                return
            self._running = False
            self._unwind(stop=True)

    def close(self) -> None:
        """Stop if running (or retry a failed finalize). Idempotent."""
        self.stop()

    def _unwind(self, stop: bool, after_failed_start: bool = False) -> None:
        """Stop (if ``stop``), destroy the config, finalize; see :meth:`stop`.

        ``after_failed_start``: aclprofStart itself failed. CANN 2026 may have set its
        "already started" flag before failing, and only a Stop clears it (Finalize does not),
        so without this every later start in the process would succeed without starting
        anything. A Stop of a config that does not run is harmless in every era.
        """
        errors: list[BaseException] = []

        def attempt(step: Callable[..., object], *args: object) -> None:
            try:
                step(*args)
            except BaseException as exc:  # keep unwinding; report below
                errors.append(exc)

        if (stop or after_failed_start) and self._config is not None:
            attempt(lowlevel.stop, self._config)
        if self._config is not None:
            attempt(self._config.close)
            self._config = None
        if self._initialised:
            try:
                lowlevel.finalize()
                self._initialised = False
            except BaseException as exc:
                # Still initialised (close() retries), unless the library says it is not.
                if isinstance(exc, ProfNotRunError):
                    self._initialised = False
                errors.append(exc)
        self._collect_result_dirs()
        if errors:
            for extra in errors[1:]:
                _log.warning("profiling teardown step also failed", error=str(extra))
            if stop:
                raise errors[0]
            # While unwinding a failed start the original exception is what matters.
            _log.warning("cleanup after a failed start also failed", error=str(errors[0]))

    def _prof_dirs(self) -> set[str]:
        try:
            return {e.name for e in os.scandir(self._output_dir) if e.is_dir() and e.name.startswith("PROF_")}
        except OSError:
            return set()

    def _collect_result_dirs(self) -> None:
        known = {p.name for p in self._result_dirs}
        for name in sorted(self._prof_dirs() - self._before - known):
            self._result_dirs.append(self._output_dir / name)

    def __enter__(self) -> Profiler:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except Exception as close_error:  # never hide the body's exception
            _log.warning("profiling teardown failed after an exception in the with-block",
                         error=str(close_error))

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return (f"<aclprof.Profiler {state} output_dir={str(self._output_dir)!r} "
                f"devices={self._devices} data_types={self._data_types!r}>")
