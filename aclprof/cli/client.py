"""A control client of the aclprof daemon (``daemon/PROTOCOL.md``), used by the CLI.

Blocking, one connection per client; every failure to reach or understand the daemon is
a :class:`DaemonError` with a readable message (the CLI prints it as one line).
"""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from typing import Any

from aclprof.protocol import streambin, wire
from aclprof.protocol.paths import permission_hint, resolve_socket_path

__all__ = ["DaemonError", "DaemonUnreachable", "DaemonRejected", "DaemonClosed", "Client", "RECORDS_PROTOCOL",
           "BINARY_STREAM_PROTOCOL", "STREAM_WIRES", "DEVICE_NEEDS_KEYS", "connect_problem"]

#: the first protocol version (WELCOME's "protocol") with JSON Lines STREAM/EXPORT records and END
RECORDS_PROTOCOL = 2
#: the first protocol version whose WELCOME lists ``stream_formats`` (binary STREAM records)
BINARY_STREAM_PROTOCOL = 5
#: how a STREAM's records travel (``aclprof tail --wire``): binary when the daemon offers it,
#: JSON Lines (as every daemon sends them), or binary or nothing
STREAM_WIRES = ("auto", "jsonl", "binary")
#: the frames of a binary STREAM the client's decoder takes (aclprof.protocol.streambin)
_BINARY_KINDS = frozenset({wire.Kind.STREAM_SOURCE, wire.Kind.STREAM_NAMES, wire.Kind.STREAM_BATCH,
                           wire.Kind.STREAM_SOURCE_END})
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


class DaemonClosed(DaemonError):
    """The connection ended without a word from the daemon: EOF, a reset (ECONNRESET: it
    closed with our request unread) or a send into a closed socket (EPIPE). Which of these a
    stopping daemon causes depends on timing only; :meth:`Client.daemon_still_listening`
    tells a stop from a daemon that closed this one connection and runs on."""


#: the socket errors that mean "the peer closed the connection", however it was noticed
_CLOSED_ERRORS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def _read_failed(exc: OSError | wire.ProtocolError) -> DaemonError:
    """The error a failed read of a reply or a stream frame raises."""
    if isinstance(exc, TimeoutError):
        return DaemonError("the daemon did not answer in time")
    if isinstance(exc, wire.ProtocolError):
        return DaemonError(f"the daemon sent a malformed frame: {exc}")
    if isinstance(exc, _CLOSED_ERRORS):
        return DaemonClosed(f"lost the daemon connection: {exc.strerror or exc}")
    return DaemonError(f"lost the daemon connection: {exc.strerror or exc}")


class Client:
    def __init__(self, socket_path: str | os.PathLike[str] | None = None, timeout: float | None = 5.0):
        self.socket_path = resolve_socket_path(socket_path)
        self._reader = wire.FrameReader()
        self._pending: list[tuple[wire.Kind, memoryview]] = []
        self._frame_buf = bytearray()  # a stream's frames, read in place (_recv_reusing)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as exc:
            sock.close()
            raise DaemonUnreachable(connect_problem(self.socket_path, exc)) from None
        self._sock = sock
        #: END's ``lost`` of the last export: records of its window the daemon failed to store
        self.export_lost: list[dict[str, Any]] = []
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
        except _CLOSED_ERRORS as exc:
            raise DaemonClosed(f"lost the daemon connection: {exc.strerror or exc}") from None
        except OSError as exc:
            raise DaemonError(f"lost the daemon connection: {exc.strerror or exc}") from None

    def _recv(self) -> tuple[wire.Kind, memoryview]:
        try:
            frame = wire.recv_frame(self._sock, self._reader, self._pending)
        except (OSError, wire.ProtocolError) as exc:
            raise _read_failed(exc) from None
        if frame is None:
            raise DaemonClosed("the daemon closed the connection")
        return frame

    def _recv_reusing(self) -> tuple[wire.Kind, memoryview]:
        """The next frame, its payload read from the socket straight into one buffer this
        client keeps: the payload is valid until the next call. A STREAM's frames (~200 KB
        of JSON per agent batch) came in 64 KiB ``recv`` pieces, each a new ``bytes``, joined
        into a new ``bytearray`` per frame: most of ``aclprof tail --json``'s CPU was
        those copies and the page faults of the fresh buffers (issue 21). Frames that came
        with an earlier read are returned first, as :meth:`_recv` does."""
        if self._pending or self._reader.buffered:
            return self._recv()
        try:
            kind, length = self._reader.check_header(self._read_into(wire.HEADER.size), 0)
            payload = self._read_into(length)
        except (OSError, wire.ProtocolError) as exc:
            raise _read_failed(exc) from None
        if kind is None:  # FrameReader() does not ignore unknown kinds: check_header raised
            raise DaemonError("the daemon sent a frame of an unknown kind")
        return kind, payload

    def _read_into(self, n: int) -> memoryview:
        """Exactly ``n`` bytes from the socket into the kept buffer (grown to the largest
        frame, at most MAX_PAYLOAD); :class:`DaemonClosed` at EOF."""
        if len(self._frame_buf) < n:
            # a new buffer, not a resize: a caller may still hold a view of the old one
            self._frame_buf = bytearray(max(n, 2 * len(self._frame_buf)))
        view = memoryview(self._frame_buf)[:n]
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if not k:
                raise DaemonClosed("the daemon closed the connection")
            got += k
        return view

    def daemon_still_listening(self) -> bool:
        """After :class:`DaemonClosed`: whether the daemon we talked to still answers on its
        socket (so it closed this connection and runs on), rather than being stopped (a
        stopping daemon closes its listener and removes its socket file before it closes any
        client), killed (nothing listens) or restarted. A new connection's WELCOME tells: the
        same daemon has the same pid and start time (a restarted one's socket file may even
        get the old one's inode number back)."""
        try:
            with Client(self.socket_path, timeout=2.0) as probe:
                again = probe.welcome
        except DaemonError:
            return False
        ours = (self.welcome.get("pid"), self.welcome.get("started_ts"))
        return None not in ours and (again.get("pid"), again.get("started_ts")) == ours

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

    def stream(self, filt: dict[str, Any], wire_format: str = "auto") -> Iterator[tuple[list[dict[str, Any]], int]]:
        """(records, skipped) per STREAM_RECORDS or STREAM_SKIPPED frame, until END."""
        for payload, skipped in self.stream_jsonl(filt, wire_format):
            yield [json.loads(line) for line in str(payload, "utf-8").splitlines()], skipped

    def offers_binary_stream(self) -> bool:
        """Whether the daemon streams binary records (WELCOME: protocol 5 and the format in
        ``stream_formats``): an older one is never asked (it would stream JSON regardless)."""
        formats = self.welcome.get("stream_formats")
        return (int(self.welcome.get("protocol", 1)) >= BINARY_STREAM_PROTOCOL and isinstance(formats, list)
                and streambin.FORMAT in formats)

    def stream_jsonl(self, filt: dict[str, Any], wire_format: str = "auto") -> Iterator[tuple[memoryview, int]]:
        """(JSON Lines payload, skipped) per frame, until END: one record a line, each
        ending in ``\\n`` (empty with a skipped count), for ``aclprof tail --json`` to write
        out untouched. ``wire_format`` (:data:`STREAM_WIRES`): with "auto" the records come
        binary when the daemon offers it and this client writes their lines with the
        daemon's own encoder (aclprof.protocol.streambin: the same bytes, a fraction of the
        daemon's CPU); "jsonl" asks for the daemon's JSON Lines; "binary" is
        :class:`DaemonRejected` by a daemon that does not offer it. A payload is valid until
        the next one is asked for (JSON Lines are read in place, and binary records written
        as lines, into buffers the client reuses): copy it (``bytes(payload)``) to keep it.
        Returns at END or GOODBYE (the daemon stopped); a connection that ends without either
        is :class:`DaemonClosed`."""
        if wire_format not in STREAM_WIRES:
            raise ValueError(f"wire_format must be one of {', '.join(STREAM_WIRES)}, not {wire_format!r}")
        self._records_protocol("STREAM")
        binary = wire_format != "jsonl" and self.offers_binary_stream()
        if wire_format == "binary" and not binary:
            raise DaemonRejected(f"the daemon (protocol {self.welcome.get('protocol', 1)}) does not stream binary "
                                 f"records: upgrade aclprofd, or stream JSON Lines (--wire jsonl)")
        request: dict[str, Any] = {"filter": filt}
        if binary:
            request["format"] = streambin.FORMAT
        self._send(wire.Kind.STREAM, request)
        decoder = streambin.StreamDecoder() if binary else None
        while True:
            kind, payload = self._recv_reusing()
            if kind == wire.Kind.STREAM_RECORDS:
                yield payload, 0
            elif decoder is not None and kind in _BINARY_KINDS:
                try:
                    for text in decoder.frame(kind, payload):  # a batch's lines: one buffer, reused
                        yield text, 0
                except wire.ProtocolError as exc:
                    raise DaemonError(f"the daemon sent a malformed {kind.name} frame: {exc}") from None
            elif kind == wire.Kind.STREAM_SKIPPED:
                yield memoryview(b""), int(wire.decode_json(payload).get("skipped", 0))
            elif kind in (wire.Kind.END, wire.Kind.GOODBYE):  # GOODBYE: the stop's word to an agent
                return
            elif kind == wire.Kind.ERROR:
                raise DaemonRejected(f"the daemon rejected STREAM: {_message(payload)}")
            else:
                raise DaemonError(f"unexpected {kind.name} frame in a stream")

    def export_jsonl(self, since_ts: float | None, until_ts: float | None,
                     filt: dict[str, Any]) -> Iterator[bytes]:
        """EXPORT_RECORDS payloads (JSON Lines) until END, whose record count is checked.
        After END, :attr:`export_lost` holds the periods of this window whose records the
        daemon failed to store (END's ``lost``: a full disk), empty if none."""
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
                end = wire.decode_json(payload)
                n = end.get("records")
                if n is not None and int(n) != seen:
                    raise DaemonError(f"export ended after {seen} records, the daemon counted {n}")
                lost = end.get("lost")
                self.export_lost = [p for p in lost if isinstance(p, dict)] if isinstance(lost, list) else []
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


def connect_problem(path: str, exc: OSError) -> str:
    """Why connecting to the daemon's socket ``path`` failed with ``exc``, told apart by what
    is at ``path``: the kernel answers ECONNREFUSED alike for a socket nobody listens on, a
    regular file and a directory."""
    if isinstance(exc, FileNotFoundError):
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent):
            return (f"no daemon socket at {path}: the directory {parent} does not exist (is aclprofd running? "
                    "set ACLPROF_SOCKET or --socket)")
        return f"no daemon socket at {path} (is aclprofd running? set ACLPROF_SOCKET or --socket)"
    if isinstance(exc, NotADirectoryError):
        return f"cannot connect to {path}: a part of the path before the last is not a directory"
    if isinstance(exc, PermissionError):
        return f"permission denied on {path}: {permission_hint(path, 'your user', 'then log in again')}"
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if isinstance(exc, ConnectionRefusedError) and st is not None:
        if stat.S_ISSOCK(st.st_mode):
            return f"nothing listens on {path} (a stale socket: the daemon is not running)"
        if stat.S_ISDIR(st.st_mode):
            return (f"{path} is a directory, not the daemon's socket (the socket is a file in it, such as "
                    f"{os.path.join(path, 'aclprofd.sock')})")
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else "not a socket"
        return f"{path} is {kind}, not the daemon's socket (give the socket with --socket or ACLPROF_SOCKET)"
    size = len(os.fsencode(path))
    if size > 107:
        return f"cannot connect to {path}: the path is {size} bytes; a Unix socket path has at most 107"
    return f"cannot connect to {path}: {exc.strerror or exc}"


def _message(payload: bytes | memoryview) -> str:
    try:
        return str(wire.decode_json(payload).get("message", "?"))
    except wire.ProtocolError:
        return bytes(payload[:200]).decode("utf-8", "replace")
