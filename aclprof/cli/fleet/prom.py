"""A small client of Prometheus' HTTP API (``GET /api/v1/query``) for ``aclprof fleet``:
standard library only, and safe against a server that misbehaves.

- Time: every request has one deadline (``timeout`` seconds, or a deadline shared by the
  queries of one refresh) for connecting, sending and reading the whole reply. A socket
  timeout alone would not do: a server that drips a byte every few seconds never trips it.
  A watchdog timer shuts the socket down at the deadline, which ends any blocked read; the
  timer is cancelled and joined on every path.
- Size: at most ``max_bytes`` of body are read (a declared Content-Length above it is refused
  before reading); a larger reply is an error, never truncated JSON.
- Content: a reply that is not JSON, or an error status, is a :class:`PrometheusError` that
  names the server, the HTTP status and Prometheus' own error text (control characters
  escaped: it is shown on a terminal).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from typing import Any

from aclprof.protocol.safetext import safe, truncate
from aclprof.protocol.version import __version__

__all__ = ["PrometheusError", "PromClient", "check_url", "DEFAULT_MAX_BYTES"]

DEFAULT_MAX_BYTES = 32 << 20  # 1,000 hosts x 50 op types is ~50k samples of ~150 bytes: ~8 MB


class PrometheusError(Exception):
    """Prometheus could not be asked, or its reply cannot be used."""


def check_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host, else ValueError saying what is wrong."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r}: the Prometheus URL must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"{url!r}: no host in the Prometheus URL")
    try:
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError:
        raise ValueError(f"{url!r}: bad port in the Prometheus URL") from None
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: give the server's base URL, without ?query or #fragment")
    return url


class PromClient:
    """Instant queries against the Prometheus at ``url`` (its base URL, with any path prefix)."""

    def __init__(self, url: str, timeout: float = 5.0, max_bytes: int = DEFAULT_MAX_BYTES):
        self.url = check_url(url).rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path
        self.timeout = timeout
        self.max_bytes = max_bytes

    def query(self, expr: str, at: float | None = None, deadline: float | None = None) -> Any:
        """The decoded JSON reply to the instant query ``expr`` (evaluated at ``at``, Unix
        seconds, or now), within ``timeout`` seconds or by ``deadline`` (time.monotonic(),
        shared by several queries) if that is sooner. HTTP errors carry Prometheus' error text."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        status, body = self._get(f"{self._prefix}/api/v1/query?{urllib.parse.urlencode(params)}", deadline)
        try:
            reply = json.loads(body)
        except (ValueError, RecursionError) as exc:  # deeply nested arrays exhaust the recursion limit
            head = truncate(safe(body[:200].decode("utf-8", "replace")), 120)
            what = f"HTTP {status}, " if status != 200 else ""
            raise PrometheusError(f"Prometheus at {self.url}: {what}reply is not JSON ({exc.__class__.__name__}): "
                                  f"'{head}'") from None
        if status != 200:
            err = reply.get("error") if isinstance(reply, dict) else None
            kind = reply.get("errorType") if isinstance(reply, dict) else None
            detail = f"{kind}: {err}" if err else "no error text"
            raise PrometheusError(f"Prometheus at {self.url}: HTTP {status}: {truncate(safe(detail), 300)}")
        return reply

    def _get(self, path: str, shared_deadline: float | None = None) -> tuple[int, bytes]:
        deadline = time.monotonic() + self.timeout
        if shared_deadline is not None:
            deadline = min(deadline, shared_deadline)
        left = deadline - time.monotonic()
        if left <= 0:
            raise PrometheusError(f"Prometheus at {self.url}: no complete reply within {self.timeout:g}s (--timeout)")
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=left)
        aborted = threading.Event()

        def abort() -> None:
            aborted.set()
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked in another thread
                except OSError:
                    pass

        watchdog = threading.Timer(left, abort)
        watchdog.name = "aclprof-fleet-deadline"
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.request("GET", path, headers={"Accept": "application/json",
                                               "User-Agent": f"aclprof-fleet/{__version__}"})
            resp = conn.getresponse()
            declared = resp.getheader("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                raise PrometheusError(f"Prometheus at {self.url}: reply of {int(declared):,} bytes is over the "
                                      f"limit of {self.max_bytes:,} (--max-bytes)")
            chunks: list[bytes] = []
            size = 0
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.max_bytes:
                    raise PrometheusError(f"Prometheus at {self.url}: reply is over the limit of "
                                          f"{self.max_bytes:,} bytes (--max-bytes)")
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    aborted.set()
                    raise TimeoutError
            if aborted.is_set():  # the watchdog's shutdown reads as an end of file
                raise TimeoutError
            if declared is not None and declared.isdigit() and size < int(declared):
                raise PrometheusError(f"Prometheus at {self.url}: reply cut short ({size:,} of {int(declared):,} "
                                      "bytes)")
            return resp.status, b"".join(chunks)
        except PrometheusError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            if aborted.is_set() or isinstance(exc, (TimeoutError, socket.timeout)):
                raise PrometheusError(f"Prometheus at {self.url}: no complete reply within {self.timeout:g}s "
                                      "(--timeout)") from None
            reason = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
            raise PrometheusError(f"Prometheus at {self.url} is unreachable: {safe(reason)}") from None
        finally:
            watchdog.cancel()
            watchdog.join()
            conn.close()
