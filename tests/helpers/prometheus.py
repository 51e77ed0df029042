"""A real Prometheus server for the tests (Debian's ``prometheus`` package; ``.ci/run``
installs it when missing): a config file with the targets and rule files, a temporary
TSDB directory, a free port on 127.0.0.1, 1 s scrape and evaluation intervals. Ready when
``/-/ready`` answers 200; stopped (SIGTERM, then SIGKILL) and its directory removed on
every path by the :func:`prometheus_factory` fixture or the :func:`prometheus_server`
context manager.

Tests that need it skip only when the binary is absent (:data:`SKIP_REASON`)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from .procs import REPO, free_port

__all__ = ["PROMETHEUS", "PROMTOOL", "RULES_DIR", "SKIP_REASON", "needs_prometheus", "needs_promtool",
           "free_port", "Prometheus", "prometheus_server", "prometheus_factory"]

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
RULES_DIR = REPO / "daemon" / "prometheus"
SKIP_REASON = ("the `prometheus`/`promtool` binaries are not installed (Debian package `prometheus`; "
               ".ci/run installs it)")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason=SKIP_REASON)
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=SKIP_REASON)


class Prometheus:
    """One server process scraping ``targets`` (``host:port`` of aclprofd metrics endpoints,
    job ``aclprofd``), with ``rule_files`` loaded."""

    def __init__(self, targets: Sequence[str], rule_files: Sequence[str | Path] = (), interval: str = "1s"):
        assert PROMETHEUS is not None, SKIP_REASON
        self.root = Path(tempfile.mkdtemp(prefix="aclp-prom-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
            "rule_files": [str(p) for p in rule_files],
            # honor_labels: the daemon's own `host` label wins over any target label
            "scrape_configs": [{"job_name": "aclprofd", "honor_labels": True,
                                "static_configs": [{"targets": list(targets)}]}],
        }
        (self.root / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log_path = self.root / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> Prometheus:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={self.root / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.root / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}: {self.log_tail()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready after {timeout}s: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH; the ``data`` of a success reply."""
        url = f"{self.url}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            reply = json.loads(r.read())
        assert reply["status"] == "success", reply
        return reply["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's result list."""
        return list(self.api("query", query=expr)["result"])

    def targets_up(self) -> int:
        """How many scrape targets are up."""
        return sum(1 for t in self.api("targets")["activeTargets"] if t.get("health") == "up")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def prometheus_server(targets: Sequence[str], rule_files: Sequence[str | Path] = (),
                      interval: str = "1s") -> Iterator[Prometheus]:
    """A started :class:`Prometheus`, stopped and removed on exit (failure included)."""
    server = Prometheus(targets, rule_files, interval)
    try:
        yield server.start()
    finally:
        server.cleanup()


@pytest.fixture
def prometheus_factory() -> Iterator[Callable[..., Prometheus]]:
    """A fixture: ``prometheus_factory(targets, rule_files=(), interval="1s")`` starts a
    server; every server it started is stopped and removed at teardown, whatever the test
    did. Import it into a test module to use it."""
    started: list[Prometheus] = []

    def start(targets: Sequence[str], rule_files: Sequence[str | Path] = (), interval: str = "1s") -> Prometheus:
        server = Prometheus(targets, rule_files, interval)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.cleanup()
