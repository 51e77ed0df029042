"""A control client of the aclprof daemon (``daemon/PROTOCOL.md``), used by the CLI.

Blocking, one connection per client; every failure to reach or understand the daemon is
a :class:`DaemonError` with a readable message (the CLI prints it as one line).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from typing import Any

from aclprof.protocol import wire
from aclprof.protocol.paths import permission_hint, resolve_socket_path

__all__ = ["DaemonError", "DaemonUnreachable", "DaemonRejected", "Client", "RECORDS_PROTOCOL", "DEVICE_NEEDS_KEYS"]

#: the first protocol version (WELCOME's "protocol") with JSON Lines STREAM/EXPORT records and END
RECORDS_PROTOCOL = 2
#: the usage error of ``--device`` with a daemon that has no device filter (Client.has_per_service_keys)
DEVICE_NEEDS_KEYS = ("--device: this daemon has no device filter (it predates per-service keys: "
                     "upgrade aclprofd)")


class DaemonError(Exception):
    """The daemon answered something unexpected, or an ERROR frame."""


class DaemonUnreachable(DaemonError):
    """No daemon listens on the socket (or it cannot be opened)."""


class DaemonRejected(DaemonError):
    """The daemon refused a STREAM (an ERROR frame) or speaks too old a protocol for it:
    reconnecting would not help (``aclprof tail -F`` stops on it)."""


class Client:
    def __init__(self, socket_path: str | os.PathLike[str] | None = None, timeout: float | None = 5.0):
        self.socket_path = resolve_socket_path(socket_path)
        self._reader = wire.FrameReader()
        self._pending: list[tuple[wire.Kind, memoryview]] = []
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(timeout)
        try:
            sock.connect(self.socket_path)
        except FileNotFoundError:
            sock.close()
            raise DaemonUnreachable(f"no daemon socket at {self.socket_path} (is aclprofd running? "
                                    "set ACLPROF_SOCKET or --socket)") from None
        except PermissionError:
            sock.close()
            raise DaemonUnreachable(f"permission denied on {self.socket_path}: "
                                    f"{permission_hint(self.socket_path, 'your user', 'then log in again')}") from None
        except ConnectionRefusedError:
            sock.close()
            raise DaemonUnreachable(f"nothing listens on {self.socket_path} (a stale socket: "
                                    "the daemon is not running)") from None
        except OSError as exc:
            sock.close()
            raise DaemonUnreachable(f"cannot connect to {self.socket_path}: {exc.strerror or exc}") from None
        self._sock = sock
        from aclprof.protocol.version import __version__

        try:
            self._send(wire.Kind.HELLO, {"role": "control", "version": __version__, "pid": os.getpid(),
                                         "host": socket.gethostname(), "service": None, "labels": {}})
            kind, payload = self._recv()
        except DaemonError:
            self.close()
            raise
        if kind == wire.Kind.ERROR:
            self.close()
            raise DaemonError(f"the daemon refused the connection: {_message(payload)}")
        if kind != wire.Kind.WELCOME:
            self.close()
            raise DaemonError(f"unexpected {kind.name} frame instead of WELCOME")
        self.welcome = wire.decode_json(payload)

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def fileno(self) -> int:
        return self._sock.fileno()

    def _send(self, kind: wire.Kind, obj: dict[str, Any]) -> None:
        try:
            self._sock.sendall(wire.encode_json(kind, obj))
        except TimeoutError:
            raise DaemonError("the daemon did not accept the request in time") from None
        except OSError as exc:
            raise DaemonError(f"lost the daemon connection: {exc.strerror or exc}") from None

    def _recv(self) -> tuple[wire.Kind, memoryview]:
        try:
            frame = wire.recv_frame(self._sock, self._reader, self._pending)
        except TimeoutError:
            raise DaemonError("the daemon did not answer in time") from None
        except wire.ProtocolError as exc:
            raise DaemonError(f"the daemon sent a malformed frame: {exc}") from None
        except OSError as exc:
            raise DaemonError(f"lost the daemon connection: {exc.strerror or exc}") from None
        if frame is None:
            raise DaemonError("the daemon closed the connection")
        return frame

    def request(self, kind: wire.Kind, obj: dict[str, Any], reply: wire.Kind) -> dict[str, Any]:
        self._send(kind, obj)
        got, payload = self._recv()
        if got == wire.Kind.ERROR:
            raise DaemonError(f"the daemon rejected {kind.name}: {_message(payload)}")
        if got != reply:
            raise DaemonError(f"unexpected {got.name} frame in reply to {kind.name}")
        try:
            return wire.decode_json(payload)
        except wire.ProtocolError as exc:
            raise DaemonError(str(exc)) from None

    def status(self) -> dict[str, Any]:
        return self.request(wire.Kind.STATUS, {}, wire.Kind.STATUS_REPLY)

    def snapshot(self, window: str, group_by: str, filt: dict[str, Any]) -> dict[str, Any]:
        return self.request(wire.Kind.SNAPSHOT, {"window": window, "group_by": group_by, "filter": filt},
                            wire.Kind.SNAPSHOT_REPLY)

    def reset(self) -> None:
        self.request(wire.Kind.RESET, {}, wire.Kind.RESET_REPLY)

    def has_per_service_keys(self) -> bool:
        """Whether the daemon keys its aggregates per service (SNAPSHOT replies carry
        ``summary``), and so also groups by service/process/device/model and filters by
        ``device``: one cheap SNAPSHOT that every daemon accepts, asked before a request an
        older daemon would refuse as malformed (closing the connection, counting a protocol
        error)."""
        return isinstance(self.snapshot("all", "type", {}).get("summary"), dict)

    def _records_protocol(self, what: str) -> None:
        if int(self.welcome.get("protocol", 1)) < RECORDS_PROTOCOL:
            raise DaemonRejected(f"the daemon speaks protocol {self.welcome.get('protocol', 1)}; {what} needs "
                              f"protocol {RECORDS_PROTOCOL} (JSON Lines records): upgrade aclprofd")

    def stream(self, filt: dict[str, Any]) -> Iterator[tuple[list[dict[str, Any]], int]]:
        """(records, skipped) per STREAM_RECORDS or STREAM_SKIPPED frame, until END."""
        for payload, skipped in self.stream_jsonl(filt):
            yield [json.loads(line) for line in str(payload, "utf-8").splitlines()], skipped

    def stream_jsonl(self, filt: dict[str, Any]) -> Iterator[tuple[memoryview, int]]:
        """(JSON Lines payload, skipped) per frame, until END: the payload as the daemon
        wrote it (one record a line, each ending in ``\\n``; empty with a skipped count),
        for ``aclprof tail --json`` to pass through untouched. Returns at END (the daemon
        stopped); a connection that ends without END is a DaemonError."""
        self._records_protocol("STREAM")
        self._send(wire.Kind.STREAM, {"filter": filt})
        while True:
            kind, payload = self._recv()
            if kind == wire.Kind.STREAM_RECORDS:
                yield payload, 0
            elif kind == wire.Kind.STREAM_SKIPPED:
                yield memoryview(b""), int(wire.decode_json(payload).get("skipped", 0))
            elif kind == wire.Kind.END:
                return
            elif kind == wire.Kind.ERROR:
                raise DaemonRejected(f"the daemon rejected STREAM: {_message(payload)}")
            else:
                raise DaemonError(f"unexpected {kind.name} frame in a stream")

    def export_jsonl(self, since_ts: float | None, until_ts: float | None,
                     filt: dict[str, Any]) -> Iterator[bytes]:
        """EXPORT_RECORDS payloads (JSON Lines) until END, whose record count is checked."""
        self._records_protocol("EXPORT")
        self._send(wire.Kind.EXPORT, {"since_ts": since_ts, "until_ts": until_ts, "filter": filt})
        seen = 0
        while True:
            kind, payload = self._recv()
            if kind == wire.Kind.EXPORT_RECORDS:
                data = bytes(payload)  # the one copy on this side: bytes can count and split lines
                seen += data.count(b"\n")
                yield data
            elif kind == wire.Kind.END:
                n = wire.decode_json(payload).get("records")
                if n is not None and int(n) != seen:
                    raise DaemonError(f"export ended after {seen} records, the daemon counted {n}")
                return
            elif kind == wire.Kind.ERROR:
                raise DaemonError(f"the daemon rejected EXPORT: {_message(payload)}")
            else:
                raise DaemonError(f"unexpected {kind.name} frame in an export")

    def export(self, since_ts: float | None, until_ts: float | None,
               filt: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
        """Lists of records (one per EXPORT_RECORDS frame) until END."""
        for payload in self.export_jsonl(since_ts, until_ts, filt):
            yield [json.loads(line) for line in payload.splitlines()]

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _message(payload: bytes | memoryview) -> str:
    try:
        return str(wire.decode_json(payload).get("message", "?"))
    except wire.ProtocolError:
        return bytes(payload[:200]).decode("utf-8", "replace")
