"""Issue 19, second hostile round, /metrics (items 1, 2 and the /metrics half of 8).

Each break as it was reproduced against main, and what holds now:

- one agent's WATCH relabels multiplied the host's series (per-agent share) and made a
  scrape hundreds of MB (the text is bounded by the memory budget's /metrics share and
  counted in ``memory.used``); 10k relabels made 310k series (defaults now cap one agent);
- 20 parallel scrapes each built the whole text (now one rendering serves them all);
- half-sent requests each held a thread for ever (now one thread, read and write
  timeouts, a connection cap, every refusal counted);
- any local user read services and op types (now: token, or root / daemon user / admin
  group / ``prometheus_allow_users`` by the peer's uid; a remote bind needs a token).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest
from helpers.daemons import InProcess, agent, status
from helpers.procs import free_port, wait_for
from helpers.records import make_records

from aclprof.protocol.wire import Kind

pytestmark = pytest.mark.timeout(120)

SERIES_PER_SET = 31  # a histogram label set: 29 buckets, _count, _sum
SERIES_PER_FINE = 220  # a fine histogram label set (issue 23): 218 buckets, _count, _sum


def _scrape(port: int, headers: dict[str, str] | None = None) -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def _value(text: str, sample: str) -> float:
    m = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    assert m, f"{sample} not in /metrics"
    return float(m.group(1))


def _label_sets(text: str, label: str, value: str, family: str = "aclprofd_op_duration_seconds") -> int:
    return sum(1 for line in text.splitlines()
               if line.startswith(f"{family}_count{{") and f'{label}="{value}"' in line)


def _relabel(a, n: int, label: str, batch: int = 1) -> None:
    """``n`` WATCH relabels of model 1, each followed by records: one new key (label set) each."""
    out = []
    from aclprof.protocol.wire import encode_batch, encode_json
    for i in range(n):
        out.append(encode_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {"model": f"{label}{i}"}}))
        out.append(encode_batch(make_records(batch, types=(1,), names=(3,))))
    a.sock.sendall(b"".join(out))


# ---- item 1: the series budget -----------------------------------------------------------------

def test_one_agents_relabels_cannot_multiply_the_series():
    """Was: every relabel a new label set, without limit; now the attacker keeps its share
    (5 fine label sets here, and 35 of the coarse histogram's: each family has its own share),
    the victim keeps all of its series, the rest is counted."""
    port = free_port()
    fine = "aclprofd_op_duration_fine_seconds"
    with InProcess(prometheus_port=port, prometheus_max_series_per_agent=5 * SERIES_PER_FINE) as d:
        victim = agent(d.socket, host="victim", service="victim")
        victim.send_batch(make_records(10))  # two label sets (Conv2D, MatMul)
        wait_for(lambda: status(d.socket)["records_total"] == 10)
        bad = agent(d.socket, host="attacker", service="attacker")
        _relabel(bad, 50, "m")
        wait_for(lambda: status(d.socket)["records_total"] == 60)
        text = _scrape(port)
        assert _label_sets(text, "service", "victim") == 2 == _label_sets(text, "service", "victim", fine)
        assert _label_sets(text, "service", "attacker") == 35  # 5 * 220 // 31
        assert _label_sets(text, "service", "attacker", fine) == 5
        refused = _value(text, 'aclprofd_metrics_series_refused{reason="agent_share"}')
        assert refused == 15 * SERIES_PER_SET + 45 * SERIES_PER_FINE
        assert _value(text, "aclprofd_metrics_agents_over_share") == 1
        st = status(d.socket)["metrics"]
        assert st["series_refused"]["agent_share"] == refused and st["agents_over_share"] == 1
        # stable: the victim's later series still fit its own share
        victim.send_batch(make_records(10, model=2))
        wait_for(lambda: status(d.socket)["records_total"] == 70)
        time.sleep(1.1)  # past the rendering's reuse time (FRESH_S)
        text = _scrape(port)
        assert _label_sets(text, "service", "victim") == 4 and _label_sets(text, "service", "attacker") == 35
        assert _label_sets(text, "service", "victim", fine) == 4 and _label_sets(text, "service", "attacker", fine) == 5


def test_long_relabels_keep_the_scrape_inside_the_memory_budget():
    """Was: 512 KB of relabels made a 771 MB scrape outside the budget. Now the text is at
    most the /metrics share (a quarter of the clients' share of memory_budget) and counted in
    memory.used."""
    port = free_port()
    budget = 32 << 20  # the aggregate and detector tables of 900 keys come off it first (~15 MiB)
    with InProcess(prometheus_port=port, memory_budget_bytes=budget) as d:
        good = agent(d.socket, host="good", service="good")
        good.send_batch(make_records(10))
        attackers = [agent(d.socket, host=f"attacker{i}", service="x" * 250) for i in range(3)]
        for i, a in enumerate(attackers):
            _relabel(a, 300, f"{i}" + "L" * 250 + "@")  # ~600-byte label sets: 31 lines each
        wait_for(lambda: status(d.socket)["records_total"] == 10 + 900)
        text = _scrape(port)
        size = len(text.encode())
        own = text.find("# HELP aclprofd_metrics_series ")  # the endpoint's own lines follow
        assert len(text[:own if own >= 0 else None].encode()) <= budget // 4 < 900 * SERIES_PER_SET * 600  # main: 17 MB
        assert _label_sets(text, "service", "good") == 2  # registered first: kept
        st = status(d.socket)
        m = st["metrics"]
        assert m["series_refused"]["agent_share"] + m["series_refused"]["bytes"] > 0
        assert _value(text, 'aclprofd_metrics_series_refused{reason="bytes"}') == m["series_refused"]["bytes"]
        assert m["held_bytes"] >= m["bytes"] and m["bytes"] <= budget // 4
        assert st["memory"]["used_bytes"] >= m["bytes"]  # the cached text is in the budget's sum
        assert size < budget // 4 + 64 << 10


def test_ten_thousand_relabels_stay_within_the_default_share():
    """Was: 10,050 short relabels, 310k series, a 17.6 s scrape; now one agent gets at most
    prometheus_max_series_per_agent (default 100k) series, whatever it sends. The aggregate
    key share (max_keys_per_agent, 2500 by default) would stop these 4000 keys first: it is
    lifted here so that the series budget is what meets them."""
    port = free_port()
    with InProcess(prometheus_port=port, max_keys_per_agent=10_000) as d:
        bad = agent(d.socket, host="attacker", service="a")
        for start in range(0, 4000, 1000):
            _relabel(bad, 1000, f"r{start}-")
        wait_for(lambda: status(d.socket)["records_total"] == 4000, timeout=60)
        text = _scrape(port)
        sets = _label_sets(text, "service", "a")
        fine = _label_sets(text, "service", "a", "aclprofd_op_duration_fine_seconds")
        assert sets * SERIES_PER_SET <= 100_000 < 4000 * SERIES_PER_SET
        assert fine == 100_000 // SERIES_PER_FINE  # the fine histogram's own share (issue 23)
        assert _value(text, 'aclprofd_metrics_series_refused{reason="agent_share"}') == \
            (4000 - sets) * SERIES_PER_SET + (4000 - fine) * SERIES_PER_FINE
        assert status(d.socket)["metrics"]["series"] >= sets * SERIES_PER_SET


def test_parallel_scrapes_share_one_rendering(monkeypatch: pytest.MonkeyPatch):
    """Was: 20 parallel scrapes built 20 texts (1.5 GiB); now one rendering serves them.
    (The reuse window is widened: under load a scraper thread can start over a second after
    the first rendering ended; test_metrics_slices checks the window itself.)"""
    from aclprofd import metrics

    monkeypatch.setattr(metrics, "FRESH_S", 60.0)
    port = free_port()
    with InProcess(prometheus_port=port, prometheus_max_connections=32) as d:
        a = agent(d.socket, service="svc")
        _relabel(a, 300, "m")
        wait_for(lambda: status(d.socket)["records_total"] == 300)
        go = threading.Barrier(20)
        bodies: list[str] = []

        def scrape() -> None:
            go.wait()
            bodies.append(_scrape(port))
        threads = [threading.Thread(target=scrape) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(bodies) == 20 and len(set(bodies)) == 1
        m = status(d.socket)["metrics"]
        assert m["renders"] == 1 and m["requests"] == 20


# ---- item 2: the listener ----------------------------------------------------------------------

def _threads() -> int:
    return threading.active_count()


def test_half_sent_requests_hold_no_thread_and_time_out():
    """Was: each half-sent request held a daemon thread for ever (476 after 10 s)."""
    port = free_port()
    with InProcess(prometheus_port=port, prometheus_read_timeout_s="0.5", prometheus_max_connections=40) as d:
        before = _threads()
        slow = []
        for _ in range(30):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never the blank line
            slow.append(s)
        time.sleep(0.2)
        assert _threads() == before  # main: one more thread per connection
        for s in slow:  # each closed by the daemon within the read timeout
            s.settimeout(5)
            assert s.recv(100) == b""
            s.close()
        m = status(d.socket)["metrics"]
        assert m["requests_refused"]["read_timeout"] == 30 and m["connections_open"] == 0
        text = _scrape(port)  # the endpoint still answers
        assert _value(text, 'aclprofd_metrics_requests_refused_total{reason="read_timeout"}') == 30


def _big_rendering(d: InProcess) -> None:
    """/metrics of ~8 MiB (with memory_budget 48 MiB, of which the tables take ~11): more than
    the socket buffers take, so a scraper that does not read holds its response."""
    for i in range(6):  # each agent's share of the bytes is 8 MiB x 100k / 500k: ~1.6 MiB
        _relabel(agent(d.socket, host=f"big{i}", service="s" * 200), 110, f"{i}" + "L" * 249)
    wait_for(lambda: status(d.socket)["records_total"] == 660)


def test_connections_that_do_not_ask_cannot_lock_a_scraper_out():
    """At the cap, a new connection evicts the one waiting longest (1 s or more) for a
    request (counted); when every connection is being answered, the new one waits for a
    slot (a burst of scrapes delays a scraper, never fails it)."""
    port = free_port()
    with InProcess(prometheus_port=port, prometheus_max_connections=2, memory_budget_bytes=48 << 20) as d:
        _big_rendering(d)
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        time.sleep(1.2)  # past EVICT_AFTER_S: a connection that has not asked for 1 s may go
        assert "aclprofd_records_total" in _scrape(port)  # the scraper gets in: the oldest went
        held[0].settimeout(5)
        assert held[0].recv(100) == b""
        refused = status(d.socket)["metrics"]["requests_refused"]
        assert refused["evicted"] == 1 and "connections" not in refused
        for s in held:
            s.close()
        # two clients being answered (a response larger than the socket buffers, not read
        # yet): a third waits, and is answered once one of them ends
        stuck = []
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            stuck.append(s)
        wait_for(lambda: status(d.socket)["metrics"]["connections_open"] == 2)
        time.sleep(0.5)
        extra = socket.create_connection(("127.0.0.1", port))
        extra.sendall(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        extra.settimeout(0.5)
        with pytest.raises(TimeoutError):
            extra.recv(100)
        stuck[0].close()
        extra.settimeout(10)
        assert extra.recv(100).startswith(b"HTTP/1.1 200 ")
        extra.close()
        stuck[1].close()
        assert "connections" not in status(d.socket)["metrics"]["requests_refused"]


def test_a_scraper_that_never_reads_is_closed_at_the_write_timeout():
    """Pipelined requests never read: the responses fill the socket buffers, then the
    daemon gives up on this client after prometheus_write_timeout (counted)."""
    port = free_port()
    with InProcess(prometheus_port=port, prometheus_write_timeout_s="0.5") as d:
        a = agent(d.socket, service="svc")
        _relabel(a, 100, "m")
        wait_for(lambda: status(d.socket)["records_total"] == 100)
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 300)
        wait_for(lambda: status(d.socket)["metrics"]["requests_refused"].get("write_timeout", 0) == 1, timeout=20)
        assert status(d.socket)["metrics"]["connections_open"] == 0
        s.close()
        assert _scrape(port)


def test_never_reading_scrapers_cannot_pin_a_rendering_each():
    """Each stuck scraper holds the rendering it was given; a scraper arriving more than 1 s
    later gets a new one. Together they may hold at most twice the /metrics share (a quarter
    of memory_budget): the oldest are closed, counted as ``superseded``."""
    port = free_port()
    budget = 48 << 20
    with InProcess(prometheus_port=port, memory_budget_bytes=budget, prometheus_max_connections=32) as d:
        _big_rendering(d)
        stuck = []
        for _ in range(6):
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            stuck.append(s)
            time.sleep(1.1)  # past FRESH_S: the next one gets a new rendering
        m = status(d.socket)["metrics"]
        assert m["bytes"] > 6 << 20, m
        assert m["requests_refused"].get("superseded", 0) >= 1
        assert m["held_bytes"] <= 2 * (budget // 4) + m["bytes"]
        for s in stuck:
            s.close()


def test_only_get_and_head_of_metrics():
    port = free_port()
    with InProcess(prometheus_port=port) as d:
        def raw(req: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(req)
                out = b""
                while chunk := s.recv(65536):
                    out += chunk
                return out
        assert raw(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 404 ")
        post = raw(b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nab")
        assert post.startswith(b"HTTP/1.1 405 ") and b"Allow: GET, HEAD" in post
        assert raw(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431 ")
        assert raw(b"BREW /metrics\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        head = raw(b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
        # keep-alive: two requests on one connection, both answered in full
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        assert out.count(b"HTTP/1.1 200 OK") == 2 and out.count(b"# TYPE aclprofd_records_total counter") == 2
        refused = status(d.socket)["metrics"]["requests_refused"]
        assert refused["not_found"] == 1 and refused["method"] == 1 and refused["too_large"] == 1
        assert refused["bad_request"] == 1


# ---- item 8: who may read /metrics -------------------------------------------------------------

NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("curl") is None,
                                reason="needs root, setpriv and curl (runs curl as the user nobody)")


def _curl_as_nobody(port: int, *args: str, host: str = "127.0.0.1") -> str:
    p = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "curl", "-s", "-g",
                        "-o", "/dev/null", "-w", "%{http_code}", *args, f"http://{host}:{port}/metrics"],
                       capture_output=True, text=True, timeout=30)
    return p.stdout


@NEEDS_ROOT
def test_another_local_user_cannot_read_metrics(tmp_path):
    """Was: any local user read services, model labels and op types (200)."""
    port = free_port()
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(0o600)
    with InProcess(prometheus_port=port, prometheus_token_file=str(token)) as d:
        a = agent(d.socket, service="secret-svc")
        a.send_batch(make_records(10))
        wait_for(lambda: status(d.socket)["records_total"] == 10)
        assert _curl_as_nobody(port) == "403"
        assert _curl_as_nobody(port, "-H", "Authorization: Bearer wrong") == "401"
        assert _curl_as_nobody(port, "-H", "Authorization: Bearer s3cret-token") == "200"
        assert 'service="secret-svc"' in _scrape(port)  # root: allowed by uid
        refused = status(d.socket)["metrics"]["requests_refused"]
        assert refused["forbidden_user"] == 1 and refused["bad_token"] == 1


@NEEDS_ROOT
def test_ipv6_and_dual_stack_loopback_peers_are_judged_by_uid(tmp_path):
    """/proc/net/tcp6 (v6 words in host order) and v4 clients of a "::" listener (v4-mapped)."""
    token = tmp_path / "token"
    token.write_text("t0k\n")
    token.chmod(0o600)
    port = free_port()
    with InProcess(prometheus_port=port, prometheus_host="::", prometheus_token_file=str(token)):
        for host in ("127.0.0.1", "[::1]"):
            assert _curl_as_nobody(port, host=host) == "403", host
            assert _curl_as_nobody(port, "-H", "Authorization: Bearer t0k", host=host) == "200", host
        assert _scrape(port)  # root, over v4 to the dual-stack listener


@NEEDS_ROOT
def test_allow_users_lets_a_named_user_read():
    port = free_port()
    with InProcess(prometheus_port=port, prometheus_allow_users="nobody"):
        assert _curl_as_nobody(port) == "200"


def test_a_remote_bind_without_a_token_refuses_to_start():
    from aclprofd import config
    from aclprofd.server import Daemon, DaemonError

    tmp = tempfile.mkdtemp(prefix="acl-m-")
    try:
        s = config.load({"socket": os.path.join(tmp, "s"), "data_dir": os.path.join(tmp, "d"),
                         "prometheus_host": "0.0.0.0", "prometheus_port": str(free_port())}, environ={})
        d = Daemon(s)
        with pytest.raises(DaemonError, match="prometheus_token_file"):
            d.start()
        d2 = Daemon(dataclasses.replace(s, prometheus_allow_unauthenticated_remote=True), rss=lambda: 0)
        d2.start()
        d2.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_world_readable_token_file_is_refused(tmp_path):
    from aclprofd import config
    from aclprofd.server import Daemon, DaemonError
    token = tmp_path / "token"
    token.write_text("t\n")
    token.chmod(0o644)
    s = config.load({"socket": str(tmp_path / "s"), "data_dir": str(tmp_path / "d"),
                     "prometheus_port": str(free_port()), "prometheus_token_file": str(token)}, environ={})
    with pytest.raises(DaemonError, match="readable by every user"):
        Daemon(s).start()


# ---- the text is prometheus_client's, byte for byte --------------------------------------------

def test_rendering_matches_prometheus_client():
    from aclprofd.metrics import DaemonCollector
    from prometheus_client import CollectorRegistry, generate_latest

    port = free_port()
    with InProcess(prometheus_port=port) as d:
        a = agent(d.socket, service='s"q\\n\nx', names={1: 'Ty"pe\\', 2: "MatMul\n", 3: "c", 4: "f"})
        a.send_json(Kind.WATCH, {"model_id": 1, "device": 0, "labels": {"model": 'm"\\\n', "version": "é"}})
        a.send_batch(make_records(1000, durations=[10**k for k in range(3, 13)] * 100))
        wait_for(lambda: status(d.socket)["records_total"] == 1000)
        status(d.socket)  # publishes the snapshot both read
        mine = d.daemon.metrics.render()
        reg = CollectorRegistry(auto_describe=False)
        reg.register(DaemonCollector(d.daemon, host_label=d.settings.prometheus_host_label))
        theirs = generate_latest(reg)
        text = b"".join(mine.chunks)
        assert text[:text.index(b"# HELP aclprofd_metrics_series ")] == theirs


def test_status_says_what_metrics_left_out():
    from aclprof.cli.status import format_status

    text = format_status({"healthy": True, "metrics": {
        "series": 1000, "series_refused": {"agent_share": 310, "total": 0, "bytes": 62}, "agents_over_share": 1,
        "requests_refused": {"forbidden_user": 2, "read_timeout": 0}}})
    assert "/metrics: 1,000 series shown, left out by the series budget: agent_share 310, bytes 62 " \
           "(1 agents over their share)" in text
    assert "/metrics requests refused: forbidden_user 2" in text and "read_timeout" not in text
    assert "/metrics" not in format_status({"healthy": True, "metrics": {"series": 5, "series_refused": {}}})
