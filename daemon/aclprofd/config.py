"""The daemon's settings: defaults < TOML file < environment < command-line flags.

Every setting is one :class:`Option` row in :data:`OPTIONS` (TOML key, environment
variable, flag, default, parser, whether SIGHUP can change it on a running daemon), so the
argparse flags, the file and environment readers and daemon/README.md's table agree.
Errors are :class:`ConfigError` with a one-line message naming the source and the key.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import socket as _socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aclprof.protocol import detectorparams as detector_rules  # one rule with `aclprof diff`
from aclprof.protocol.paths import default_socket_path  # one rule for the daemon, agents and the CLI
from aclprof.protocol.wire import AGENT_HEARTBEAT_S

from .cpuslice import check_slice_us

__all__ = ["Settings", "Option", "OPTIONS", "ConfigError", "load", "parse_size", "parse_duration",
           "default_data_dir", "add_arguments"]


class ConfigError(ValueError):
    """A setting that cannot be used; the message is one readable line."""


_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 1000**2, "mb": 1000**2,
               "mib": 1 << 20, "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "t": 1000**4,
               "tb": 1000**4, "tib": 1 << 40}
_DURATION_UNITS = {"": 1.0, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_size(value: Any) -> int:
    """Bytes from an int or a string like ``64MiB``, ``1GB``, ``500k``."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"bad size {value!r} (examples: 1048576, 64MiB, 1GB)")
        n = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if n <= 0:
        raise ValueError(f"size must be positive, not {value!r}")
    return n


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string like ``500ms``, ``10s``, ``1m``, ``7d``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        s = float(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", str(value))
        if not m or m.group(2) not in _DURATION_UNITS:
            raise ValueError(f"bad duration {value!r} (examples: 0.5, 500ms, 10s, 1m, 7d)")
        s = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if s <= 0:
        raise ValueError(f"duration must be positive, not {value!r}")
    return s


def _parse_cpu_slice(value: Any) -> float:
    """``cpu_slice``: 0 (the kernel's default slice) or a duration the kernel accepts."""
    if value in (0, "0", 0.0):
        return 0.0
    us = round(parse_duration(value) * 1e6)  # whole microseconds, as the kernel takes it
    check_slice_us(us, repr(value))
    return us / 1e6


def _parse_windows(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out = sorted({round(parse_duration(v)) for v in items if str(v).strip()})
    if not out or out[0] < 1:
        raise ValueError(f"bad windows {value!r} (example: 10s,1m)")
    if out[-1] > 3600:
        raise ValueError("windows longer than 1h are not supported (one slot per second)")
    return tuple(out)


def _parse_baseline_name(value: Any) -> str | None:
    if value in (None, ""):
        return None
    from aclprof.protocol.baselinefmt import check_name
    return check_name(str(value))


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"bad boolean {value!r} (true/false)")


def _parse_port(value: Any) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {value!r} is not in 0..65535")
    return port


def _parse_choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        v = str(value).lower()
        if v not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return v
    return parse


def _parse_positive_int(value: Any) -> int:
    n = int(value)
    if n < 1:
        raise ValueError(f"{value!r} must be at least 1")
    return n


def _parse_host_label(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{value!r} must be a non-empty string (the host's name in Prometheus labels)")
    if len(value.encode("utf-8", "surrogatepass")) > 256:
        raise ValueError("must be at most 256 bytes")
    return value


def _parse_user_list(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    out = tuple(str(v).strip() for v in items if str(v).strip())
    for name in out:
        if not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*\$?", name) or len(name) > 64:
            raise ValueError(f"{name!r} is not a user name")
    return out


def _parse_capture_count(value: Any) -> int:
    n = int(value)
    if not 1 <= n <= 1000:
        raise ValueError(f"{value!r} must be in 1..1000 (STATUS lists every capture)")
    return n


def _parse_capture_span(value: Any) -> float:
    s = parse_duration(value)
    if s > 3600:
        raise ValueError(f"{value!r} must be at most 1h (the records are read back from the segment files)")
    return s


def _parse_capture_interval(value: Any) -> float:
    """A duration, or 0 (no rate limit)."""
    if str(value).strip() in ("0", "0s", "0.0"):
        return 0.0
    return parse_duration(value)


def _parse_capture_bytes(value: Any) -> int:
    n = parse_size(value)
    if n < 1 << 20:
        raise ValueError(f"{value!r} must be at least 1MiB")
    return n


def _parse_agent_idle(value: Any) -> float:
    s = parse_duration(value)
    if s < 2 * AGENT_HEARTBEAT_S:
        raise ValueError(f"{value!r} must be at least {2 * AGENT_HEARTBEAT_S:g}s (agents send a heartbeat every "
                         f"{AGENT_HEARTBEAT_S:g}s: a shorter timeout would close live ones)")
    return s


def _opt_str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def default_data_dir(environ: Mapping[str, str] | None = None) -> str:
    """``/var/lib/aclprof`` as root, else ``$XDG_STATE_HOME/aclprof`` (~/.local/state/aclprof)."""
    env = os.environ if environ is None else environ
    if os.geteuid() == 0 and not env.get("XDG_STATE_HOME"):
        return "/var/lib/aclprof"
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "aclprof")


@dataclass(frozen=True)
class Settings:
    socket: str
    socket_group: str | None = None
    data_dir: str = ""
    segment_bytes: int = 64 << 20
    disk_bytes: int = 1 << 30
    max_age_s: float = 7 * 86400.0
    #: "compact": records stored encoded ("ACK3" chunks, ~1/7 of the bytes); "raw": as
    #: received, readable by an aclprof older than the encoding (a downgrade)
    segment_format: str = "compact"
    flush_interval_s: float = 1.0
    #: the CPU slice asked of the kernel for the daemon's threads (aclprofd.cpuslice; 0: its default)
    cpu_slice_s: float = 100e-6
    prometheus_host: str = "127.0.0.1"
    prometheus_port: int = 9464
    prometheus_op_name: bool = False
    #: the ``host`` label of the op histograms (one daemon is one host)
    prometheus_host_label: str = field(default_factory=_socket.gethostname)
    # /metrics bounds and access (aclprofd.promtext, aclprofd.httpd, aclprofd.metrics_access;
    # daemon/README.md "Prometheus series budget" and "Security model")
    prometheus_max_series: int = 500_000
    prometheus_max_series_per_agent: int = 100_000
    prometheus_max_connections: int = 16
    prometheus_read_timeout_s: float = 10.0
    prometheus_write_timeout_s: float = 30.0
    prometheus_token_file: str | None = None
    prometheus_allow_users: tuple[str, ...] = ("prometheus",)
    prometheus_allow_unauthenticated_remote: bool = False
    log_level: str = "info"
    log_format: str = "auto"
    log_file: str | None = None
    max_keys: int = 10_000
    windows: tuple[int, ...] = (10, 60)
    stream_buffer_bytes: int = 8 << 20
    config_file: str | None = None
    memory_budget_bytes: int = 512 << 20
    control_idle_timeout_s: float = 60.0
    max_control_connections: int = 64
    # agents (aclprofd.connlimits; daemon/README.md "Limits")
    agent_idle_timeout_s: float = 60.0
    max_agent_connections_per_uid: int = 1024
    # per-agent shares of the daemon-wide tables (aclprofd.tables; daemon/README.md "Limits")
    max_keys_per_agent: int = 2500
    max_cells_per_agent: int = 1024
    max_keys_per_uid: int = 5000
    max_cells_per_uid: int = 2048
    table_idle_timeout_s: float = 600.0
    aggregate_idle_timeout_s: float = 86400.0
    admin_group: str | None = None
    #: a traced process that has not answered when every other one has (and the duration is
    #: over) is given this long more, then reported as silent (aclprofd.trace; issue 19)
    trace_straggler_grace_s: float = 3.0
    # regression detector (aclprofd.detector.engine; daemon/README.md "Regression detection")
    detector_window_s: float = 30.0
    detector_trailing_s: float = 600.0
    detector_min_effect: float = 0.05
    detector_min_count: int = 1000
    detector_persistence: int = 5
    detector_z: float = 4.0
    detector_baseline: str | None = None
    # flight recorder (aclprofd.capture.recorder; daemon/README.md "Flight recorder")
    capture_enabled: bool = True
    capture_before_s: float = 30.0
    capture_after_s: float = 10.0
    capture_max_count: int = 20
    capture_max_bytes: int = 256 << 20
    capture_min_interval_s: float = 600.0


@dataclass(frozen=True)
class Option:
    field: str          # Settings attribute
    toml: str           # key in the TOML file
    env: str            # environment variable
    flag: str           # command-line flag
    parse: Callable[[Any], Any]
    live: bool          # SIGHUP applies it to a running daemon
    help: str


OPTIONS: tuple[Option, ...] = (
    Option("socket", "socket", "ACLPROF_SOCKET", "--socket", str, False,
           "Unix socket path (default $XDG_RUNTIME_DIR/aclprof/aclprofd.sock, else /run/aclprof/aclprofd.sock)"),
    Option("socket_group", "socket_group", "ACLPROFD_SOCKET_GROUP", "--socket-group", _opt_str, False,
           "group owning the socket (mode 0660): members may connect"),
    Option("data_dir", "data_dir", "ACLPROFD_DATA_DIR", "--data-dir", str, False,
           "segment directory (default $XDG_STATE_HOME/aclprof, /var/lib/aclprof as root)"),
    Option("segment_bytes", "segment_size", "ACLPROFD_SEGMENT_SIZE", "--segment-size", parse_size, True,
           "close a segment file at this size (default 64MiB)"),
    Option("disk_bytes", "disk_cap", "ACLPROFD_DISK_CAP", "--disk-cap", parse_size, True,
           "delete the oldest segments beyond this total (default 1GiB)"),
    Option("max_age_s", "max_age", "ACLPROFD_MAX_AGE", "--max-age", parse_duration, True,
           "delete segments older than this (default 7d)"),
    Option("segment_format", "segment_format", "ACLPROFD_SEGMENT_FORMAT", "--segment-format",
           _parse_choice("compact", "raw"), True,
           "compact (records encoded, ~7x smaller) or raw (as received: for a downgrade to an aclprof "
           "that reads only those; default compact)"),
    Option("flush_interval_s", "flush_interval", "ACLPROFD_FLUSH_INTERVAL", "--flush-interval", parse_duration, True,
           "write received records to disk this often; kill -9 loses at most this much (default 1s)"),
    Option("cpu_slice_s", "cpu_slice", "ACLPROFD_CPU_SLICE", "--cpu-slice", _parse_cpu_slice, False,
           "how long one of the daemon's threads may keep a contended CPU before a waiting task gets it "
           "(Linux >= 6.12; 0: the kernel's default; default 100us)"),
    Option("prometheus_host", "prometheus_host", "ACLPROFD_PROMETHEUS_HOST", "--prometheus-host", str, False,
           "address of the Prometheus endpoint (default 127.0.0.1)"),
    Option("prometheus_port", "prometheus_port", "ACLPROFD_PROMETHEUS_PORT", "--prometheus-port", _parse_port, False,
           "port of the Prometheus endpoint, 0 disables it (default 9464)"),
    Option("prometheus_op_name", "prometheus_op_name", "ACLPROFD_PROMETHEUS_OP_NAME", "--prometheus-op-name",
           _parse_bool, True, "add an op_name label to the duration histograms (high cardinality; default false)"),
    Option("prometheus_host_label", "prometheus_host_label", "ACLPROFD_PROMETHEUS_HOST_LABEL",
           "--prometheus-host-label", _parse_host_label, False,
           "the host label of the op duration histograms (default: this host's name)"),
    Option("prometheus_max_series", "prometheus_max_series", "ACLPROFD_PROMETHEUS_MAX_SERIES",
           "--prometheus-max-series", _parse_positive_int, False,
           "series /metrics shows at most; later ones are left out and counted (default 500000)"),
    Option("prometheus_max_series_per_agent", "prometheus_max_series_per_agent",
           "ACLPROFD_PROMETHEUS_MAX_SERIES_PER_AGENT", "--prometheus-max-series-per-agent", _parse_positive_int,
           False, "op duration series one agent process (host, pid) may create in /metrics; later ones are "
           "left out and counted (default 100000)"),
    Option("prometheus_max_connections", "prometheus_max_connections", "ACLPROFD_PROMETHEUS_MAX_CONNECTIONS",
           "--prometheus-max-connections", _parse_positive_int, False,
           "HTTP connections to /metrics at once; one more evicts the one waiting longest for a request, "
           "or waits for a slot when all are being answered (503 after the read timeout); counted (default 16)"),
    Option("prometheus_read_timeout_s", "prometheus_read_timeout", "ACLPROFD_PROMETHEUS_READ_TIMEOUT",
           "--prometheus-read-timeout", parse_duration, False,
           "a /metrics request must arrive within this (default 10s)"),
    Option("prometheus_write_timeout_s", "prometheus_write_timeout", "ACLPROFD_PROMETHEUS_WRITE_TIMEOUT",
           "--prometheus-write-timeout", parse_duration, False,
           "a /metrics response must be taken by the client within this (default 30s)"),
    Option("prometheus_token_file", "prometheus_token_file", "ACLPROFD_PROMETHEUS_TOKEN_FILE",
           "--prometheus-token-file", _opt_str, False,
           "file with a bearer token that lets any peer read /metrics (not world-readable; Prometheus: "
           "authorization: credentials_file:)"),
    Option("prometheus_allow_users", "prometheus_allow_users", "ACLPROFD_PROMETHEUS_ALLOW_USERS",
           "--prometheus-allow-users", _parse_user_list, False,
           "local users who may read /metrics besides root, the daemon's user and the admin group, comma "
           "separated (default prometheus)"),
    Option("prometheus_allow_unauthenticated_remote", "prometheus_allow_unauthenticated_remote",
           "ACLPROFD_PROMETHEUS_ALLOW_UNAUTHENTICATED_REMOTE", "--prometheus-allow-unauthenticated-remote",
           _parse_bool, False,
           "let anyone who reaches the port read /metrics (needed for a non-loopback bind without a token "
           "file; default false)"),
    Option("log_level", "log_level", "ACLPROFD_LOG_LEVEL", "--log-level",
           _parse_choice("debug", "info", "warning", "error"), True, "debug, info, warning or error (default info)"),
    Option("log_format", "log_format", "ACLPROFD_LOG_FORMAT", "--log-format",
           _parse_choice("auto", "console", "json"), True,
           "auto (console on a terminal, else JSON lines), console or json (default auto)"),
    Option("log_file", "log_file", "ACLPROFD_LOG_FILE", "--log-file", _opt_str, True,
           "append logs to this file instead of stderr; reopened on SIGHUP (for logrotate)"),
    Option("max_keys", "max_keys", "ACLPROFD_MAX_KEYS", "--max-keys", _parse_positive_int, False,
           "aggregate cardinality cap: further keys share one '(other)' key (default 10000)"),
    Option("windows", "windows", "ACLPROFD_WINDOWS", "--windows", _parse_windows, False,
           "sliding windows of the aggregates, comma separated (default 10s,1m)"),
    Option("stream_buffer_bytes", "stream_buffer", "ACLPROFD_STREAM_BUFFER", "--stream-buffer", parse_size, True,
           "outgoing buffer per STREAM client; when full its records are skipped and counted (default 8MiB)"),
    Option("memory_budget_bytes", "memory_budget", "ACLPROFD_MEMORY_BUDGET", "--memory-budget", parse_size, True,
           "the daemon's RSS: its own base and tables, an eighth for allocator slack, and the rest for "
           "what all clients together may make it hold (queued replies, name tables, unstored records); "
           "a client past its share is refused and counted (default 512MiB)"),
    Option("control_idle_timeout_s", "control_idle_timeout", "ACLPROFD_CONTROL_IDLE_TIMEOUT",
           "--control-idle-timeout", parse_duration, True,
           "close a control client that sends no request this long and neither streams nor exports (default 60s)"),
    Option("max_control_connections", "max_control_connections", "ACLPROFD_MAX_CONTROL_CONNECTIONS",
           "--max-control-connections", _parse_positive_int, True,
           "control clients at once; a new one evicts the longest idle one (default 64)"),
    Option("agent_idle_timeout_s", "agent_idle_timeout", "ACLPROFD_AGENT_IDLE_TIMEOUT", "--agent-idle-timeout",
           _parse_agent_idle, True,
           f"close an agent connection that sends no frame this long; live agents send a heartbeat every "
           f"{AGENT_HEARTBEAT_S:g}s (default 60s, at least {2 * AGENT_HEARTBEAT_S:g}s)"),
    Option("max_agent_connections_per_uid", "max_agent_connections_per_uid", "ACLPROFD_MAX_AGENT_CONNECTIONS_PER_UID",
           "--max-agent-connections-per-uid", _parse_positive_int, True,
           "agent connections one uid may hold (root is exempt); further ones are refused (default 1024)"),
    Option("max_keys_per_agent", "max_keys_per_agent", "ACLPROFD_MAX_KEYS_PER_AGENT", "--max-keys-per-agent",
           _parse_positive_int, True,
           "aggregate keys one agent (uid, pid) may register; its further keys share '(other)' (default 2500)"),
    Option("max_cells_per_agent", "max_cells_per_agent", "ACLPROFD_MAX_CELLS_PER_AGENT", "--max-cells-per-agent",
           _parse_positive_int, True,
           "regression detector cells one agent (uid, pid) may create; its further ops are not judged, "
           "counted (default 1024 of 4096)"),
    Option("max_keys_per_uid", "max_keys_per_uid", "ACLPROFD_MAX_KEYS_PER_UID", "--max-keys-per-uid",
           _parse_positive_int, True,
           "aggregate keys the agents of one uid may register together (root is exempt) (default 5000)"),
    Option("max_cells_per_uid", "max_cells_per_uid", "ACLPROFD_MAX_CELLS_PER_UID", "--max-cells-per-uid",
           _parse_positive_int, True,
           "regression detector cells the agents of one uid may create together (root is exempt) (default 2048)"),
    Option("table_idle_timeout_s", "table_idle_timeout", "ACLPROFD_TABLE_IDLE_TIMEOUT", "--table-idle-timeout",
           parse_duration, True,
           "forget a detector cell whose agent is gone and that nothing fed this long (default 10m)"),
    Option("aggregate_idle_timeout_s", "aggregate_idle_timeout", "ACLPROFD_AGGREGATE_IDLE_TIMEOUT",
           "--aggregate-idle-timeout", parse_duration, True,
           "forget an aggregate key (its since-start figures) whose agent is gone and that nothing fed this long "
           "(default 24h, at least the longest window)"),
    Option("admin_group", "admin_group", "ACLPROFD_ADMIN_GROUP", "--admin-group", _opt_str, True,
           "members may send control requests besides STATUS (export, reset, snapshot, stream), as may "
           "root and the daemon's user"),
    Option("trace_straggler_grace_s", "trace_straggler_grace", "ACLPROFD_TRACE_STRAGGLER_GRACE",
           "--trace-straggler-grace", parse_duration, True,
           "aclprof trace: once every other traced process has answered, wait this long more for the rest, "
           "then report them as silent and ask them no more until they answer (default 3s)"),
    Option("detector_window_s", "detector_window", "ACLPROFD_DETECTOR_WINDOW", "--detector-window",
           parse_duration, False, "regression detector: the current window compared with the baseline (default 30s)"),
    Option("detector_trailing_s", "detector_trailing", "ACLPROFD_DETECTOR_TRAILING", "--detector-trailing",
           parse_duration, False, "regression detector: time constant of the decayed trailing baseline (default 10m)"),
    Option("detector_min_effect", "detector_min_effect", "ACLPROFD_DETECTOR_MIN_EFFECT", "--detector-min-effect",
           detector_rules.MIN_EFFECT.check, True,
           "regression detector: smallest quantile shift flagged, 0.05 = 5 percent (default 0.05)"),
    Option("detector_min_count", "detector_min_count", "ACLPROFD_DETECTOR_MIN_COUNT", "--detector-min-count",
           detector_rules.MIN_COUNT.check, True, "regression detector: samples needed in each window (default 1000)"),
    Option("detector_persistence", "detector_persistence", "ACLPROFD_DETECTOR_PERSISTENCE",
           "--detector-persistence", _parse_positive_int, True,
           "regression detector: consecutive 1 s evaluations to flag and to clear (default 5)"),
    Option("detector_z", "detector_z", "ACLPROFD_DETECTOR_Z", "--detector-z", detector_rules.Z.check, True,
           "regression detector: half-width of the quantile intervals in standard errors (default 4.0)"),
    Option("detector_baseline", "detector_baseline", "ACLPROFD_DETECTOR_BASELINE", "--detector-baseline",
           _parse_baseline_name, True,
           "regression detector: judge against this saved baseline (aclprof baseline save NAME) instead of "
           "the trailing one"),
    Option("capture_enabled", "capture_enabled", "ACLPROFD_CAPTURE", "--capture", _parse_bool, True,
           "flight recorder: keep the records around each new regression flag in captures/ (default True)"),
    Option("capture_before_s", "capture_before", "ACLPROFD_CAPTURE_BEFORE", "--capture-before", _parse_capture_span,
           True, "flight recorder: seconds of records before the flag (default 30s)"),
    Option("capture_after_s", "capture_after", "ACLPROFD_CAPTURE_AFTER", "--capture-after", _parse_capture_span,
           True, "flight recorder: seconds of records after the flag (default 10s)"),
    Option("capture_max_count", "capture_max_count", "ACLPROFD_CAPTURE_MAX_COUNT", "--capture-max-count",
           _parse_capture_count, True, "flight recorder: captures kept, the oldest deleted first (default 20)"),
    Option("capture_max_bytes", "capture_max_size", "ACLPROFD_CAPTURE_MAX_SIZE", "--capture-max-size",
           _parse_capture_bytes, True,
           "flight recorder: bytes of all captures; one larger alone is truncated to fit (default 256MiB)"),
    Option("capture_min_interval_s", "capture_min_interval", "ACLPROFD_CAPTURE_MIN_INTERVAL",
           "--capture-min-interval", _parse_capture_interval, True,
           "flight recorder: at most one capture per service, model and op type this often (default 10m)"),
)
_BY_FIELD = {o.field: o for o in OPTIONS}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per option (default None: "not given on the command line")."""
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file with settings (also $ACLPROFD_CONFIG); flags and environment override it")
    for o in OPTIONS:
        if o.parse is _parse_bool:
            parser.add_argument(o.flag, dest=o.field, action=argparse.BooleanOptionalAction, default=None,
                                help=o.help)
        else:
            parser.add_argument(o.flag, dest=o.field, metavar=o.field.split("_")[-1].upper(), default=None,
                                help=o.help)


def load(args: argparse.Namespace | Mapping[str, Any] | None = None,
         environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from defaults, then the TOML file, then the environment, then ``args``."""
    env = os.environ if environ is None else environ
    given = dict(vars(args)) if isinstance(args, argparse.Namespace) else dict(args or {})
    values: dict[str, Any] = {"socket": default_socket_path({k: v for k, v in env.items() if k != "ACLPROF_SOCKET"}),
                              "data_dir": default_data_dir(env)}
    config_file = given.get("config") or env.get("ACLPROFD_CONFIG") or None
    if config_file:
        try:
            with open(config_file, "rb") as f:
                doc = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file}: {exc}") from None
        by_toml = {o.toml: o for o in OPTIONS}
        for key, raw in doc.items():
            o = by_toml.get(key)
            if o is None:
                raise ConfigError(f"config file {config_file}: unknown key {key!r} "
                                  f"(known: {', '.join(sorted(by_toml))})")
            values[o.field] = _apply(o, raw, f"config file {config_file}: {key}")
    for o in OPTIONS:
        raw = env.get(o.env)
        if raw not in (None, ""):
            values[o.field] = _apply(o, raw, f"environment {o.env}")
    for o in OPTIONS:
        raw = given.get(o.field)
        if raw is not None:
            values[o.field] = _apply(o, raw, o.flag)
    s = Settings(config_file=config_file, **values)
    agent_share = 4096 - 256 - s.max_control_connections  # aclprofd.connlimits.ConnLimits.agent_share
    if s.max_agent_connections_per_uid >= agent_share:
        raise ConfigError(f"max_agent_connections_per_uid ({s.max_agent_connections_per_uid}) must be below the "
                          f"agents' share of the connections ({agent_share}), or one user could take every slot")
    if s.segment_bytes > s.disk_bytes // 4:
        # keep at least 4 segments under the cap, so rotation deletes at most a quarter
        s = dataclasses.replace(s, segment_bytes=max(4096, s.disk_bytes // 4))
    return s


def _apply(o: Option, raw: Any, where: str) -> Any:
    try:
        return o.parse(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def changed(old: Settings, new: Settings) -> tuple[list[str], list[str]]:
    """(live settings that differ, restart-only settings that differ), by TOML key."""
    live: list[str] = []
    restart: list[str] = []
    for o in OPTIONS:
        if getattr(old, o.field) != getattr(new, o.field):
            (live if o.live else restart).append(o.toml)
    return live, restart
