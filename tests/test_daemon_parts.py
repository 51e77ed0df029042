"""How the daemon's parts depend on each other (issue 18): each gets what it uses, none imports
the daemon object (``aclprofd.server``), none reads another's private attributes, and the
modules of ``daemon/aclprofd/`` form the layers of ``[tool.importlinter]`` without a cycle.
Read from the source (``tests/helpers/importgraph.py``); ``lint-imports`` checks the same
contracts in CI. Plus the rules those parts now share: one memory sum, one rate limit of
log lines, one GOODBYE frame, and a SIGHUP's ``memory_budget`` reaching the budget checks.
"""

from __future__ import annotations

import ast
import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.daemons import InProcess, agent, status
from helpers.importgraph import _daemon_layers, _rank, build, sccs
from helpers.procs import REPO, wait_for

from aclprof.protocol.wire import FrameReader, Kind, decode_json, encode_names

COMPOSERS = {"aclprofd.server", "aclprofd.main", "aclprofd.__main__"}


@pytest.fixture(scope="module")
def graph():
    return build(REPO).sub("aclprofd")


def test_no_part_imports_the_daemon_object(graph):
    """Not even under TYPE_CHECKING: a part names what it uses (a Protocol beside it)."""
    bad = sorted(m for m, targets in graph.edges.items() if m not in COMPOSERS and "aclprofd.server" in targets)
    assert bad == [], f"these import aclprofd.server; give them a Protocol of what they use: {bad}"


def test_the_daemon_has_no_import_cycle(graph):
    cycles = [c for c in sccs(graph) if len(c) > 1]
    assert cycles == []


def _folders(graph):
    """The package itself and its family folders (aggregate/, capture/, detector/)."""
    return {m for m, p in graph.paths.items() if p.name == "__init__.py"}


def test_the_family_folders_import_nothing(graph):
    """A folder's ``__init__`` runs before any of its modules: an import there would load the
    whole family for one module, and sit in no layer."""
    assert {m: sorted(graph.edges[m]) for m in _folders(graph) - {"aclprofd"} if graph.edges[m]} == {}


def test_every_daemon_module_is_in_a_layer_and_no_import_runs_back_up(graph):
    layers = _daemon_layers(REPO / "pyproject.toml")
    missing = sorted(m for m in graph.paths if m not in _folders(graph) and _rank(m, layers) is None)
    assert missing == [], f"add these to the layers contract in pyproject.toml: {missing}"
    folders = _folders(graph)
    up = sorted((a, b) for a, targets in graph.edges.items() if a not in folders
                for b in targets if b not in folders and _rank(b, layers) > _rank(a, layers))
    assert up == []


def test_no_part_reads_another_objects_private_attributes():
    """``x._name`` only on ``self``/``cls`` or the class being defined (trace.py read the
    transport's ``_controls``: it asks ``keep_waiting`` now)."""
    bad = []
    for path in sorted((REPO / "daemon" / "aclprofd").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls", *classes})):
                bad.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert bad == []


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter not installed (the lint extra)")
def test_lint_imports_keeps_every_contract():
    out = subprocess.run(["lint-imports", "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_memory_used_is_the_sum_of_what_each_connection_holds():
    from aclprofd.memory import Memory

    class Held:  # the budget's one rule is Conn.held(); Memory sums it, nothing else
        stream = None  # not a STREAM client

        def __init__(self, n: int) -> None:
            self.n = n

        def held(self) -> int:
            return self.n

    refused: dict[str, int] = {}
    tables = [50]
    m = Memory({3: Held(100), 4: Held(23)}, 1000, refused, rss=lambda: 300)  # type: ignore[dict-item]
    m.tables.append(lambda: tables[0])
    m.start()  # the base: resident bytes less the tables then
    assert (m.base, m.own(), m.slack()) == (250, 300, 1000 // 8)
    assert m.share() == 1000 - 300 - 125 == 575  # the clients' share
    assert m.used() == 123
    assert m.fits(575 - 123) and not m.fits(576 - 123)
    assert (m.names_share(), m.reply_cap(), m.metrics_share()) == (575 // 8, 575 // 4, 575 // 4)
    tables[0] = 150  # the tables grew: read again at the next flush
    assert m.problem() is None
    m.refresh()
    assert m.share() == 475 and not m.fits(475 - 122)
    assert m.problem() is None  # 475 >= 1000 // 4
    tables[0] = 400
    m.refresh()
    assert m.share() == 225
    msg = m.problem()  # a STATUS problem: under a quarter of the budget left to clients
    assert msg is not None and "leave clients 0 MiB of memory_budget (0 MiB), under a quarter" in msg, msg
    m.refuse("names")
    assert refused == {"names": 1}


def test_a_budget_that_leaves_clients_under_a_quarter_of_it_is_refused():
    from aclprofd.memory import Memory

    m = Memory({}, 160 << 20, {}, rss=lambda: 90 << 20)
    m.start()  # 160 - 90 - 20 = 50 MiB for clients: at least 40
    assert m.too_small(144 << 20) is None  # 144 - 90 - 18 = 36: a quarter, just
    msg = m.too_small((144 << 20) - 8)
    assert msg is not None and "90.0 MiB resident at start, its base" in msg and "to 145MiB or more" in msg, msg
    small = Memory({}, 100 << 20, {}, rss=lambda: 90 << 20)
    with pytest.raises(ValueError, match=r"memory_budget of 104857600 bytes \(100.0 MiB\) is too small"):
        small.start()


def test_a_conn_holds_its_queue_names_unstored_records_and_partial_frame():
    import socket

    from aclprofd.conn import Conn
    a, b = socket.socketpair()
    try:
        c = Conn(a, "x")
        c.out += b"12345"
        c.names_bytes = 1000
        c.pending_bytes = 70
        list(c.reader.feed(encode_names({1: "Conv2D"})[0][:7]))  # a frame's first 7 bytes
        assert c.held() == 5 + 1000 + 70 + 7
    finally:
        a.close()
        b.close()


def _names_refused(sock_path: str, table: dict[int, str]) -> str | None:
    """Send ``table`` as an agent; the ERROR message if the daemon refused it, else None."""
    a = agent(sock_path, names={1: "x"})
    try:
        a.names(table)
        a.sock.settimeout(1.0)  # a table taken is answered by nothing
        try:
            kind, payload = a.recv()
        except (TimeoutError, EOFError):
            return None
        return decode_json(payload)["message"] if kind == Kind.ERROR else None
    finally:
        a.close()


def test_sighup_memory_budget_reaches_the_budget_checks(tmp_path):
    """memory_budget is live: after a reload the names share (an eighth of the clients'
    share of the budget) is the new budget's, in the refusal and in STATUS (the budget is no
    longer read off the settings at each check, so the reload must hand it over)."""
    table = {i: f"op_name_{i:06d}" for i in range(2, 2000)}  # ~430 KB charged: far below 64 MiB / 8
    with InProcess(memory_budget="64MiB", data_dir=tmp_path / "data") as d:
        assert _names_refused(d.socket, table) is None
        d.daemon._reload = lambda: dataclasses.replace(d.settings, memory_budget_bytes=2 << 20)
        d.daemon.request_reload()
        wait_for(lambda: status(d.socket)["memory"]["budget_bytes"] == 2 << 20)
        msg = _names_refused(d.socket, table)
        mem = status(d.socket)["memory"]
        share = mem["clients_share_bytes"] // 8
        assert share < 430_000
        assert msg is not None and "NAMES refused" in msg and f"({share} bytes)" in msg, (msg, mem)
        assert mem["refused"].get("names") == 1


def test_one_rate_limit_rule_for_log_lines():
    from aclprofd.logsetup import LineGuard
    from aclprofd.ratelimit import LogLimiter, RateWindow

    now = [0.0]
    w = RateWindow(2, 10.0, clock=lambda: now[0])
    assert [w.allow("e") for _ in range(4)] == [0, 0, None, None]
    assert w.allow("other") == 0  # per key
    now[0] = 10.0
    assert w.allow("e") == 2  # the next window says how many were left out
    # both users apply it: the parts' LogLimiter and the log's last guard
    assert isinstance(LogLimiter()._window, RateWindow)
    assert isinstance(LineGuard()._window, RateWindow)


def test_goodbye_is_built_in_one_place():
    from aclprofd.transport import goodbye_frame

    class C:
        records, dropped = 12, 3

    [(kind, payload)] = list(FrameReader().feed(goodbye_frame(C())))  # type: ignore[arg-type]
    assert kind == Kind.GOODBYE and decode_json(payload) == {"records": 12, "dropped": 3}
    src = "\n".join(p.read_text(encoding="utf-8") for p in Path(REPO, "daemon", "aclprofd").glob("*.py"))
    assert src.count("Kind.GOODBYE") == 1


def test_table_bytes_count_each_array_once_views_included():
    """The tables' share of the budget is read from the arrays themselves (aclprofd.memory
    array_bytes): a view is its base's bytes, counted once; the daemon's nested objects and
    lists of them are walked, dicts not."""
    import numpy as np
    from aclprofd.aggregate.aggregator import Aggregator
    from aclprofd.memory import array_bytes

    agg = Aggregator(100)
    own = array_bytes(agg)
    assert own >= agg.hist.nbytes + agg.fine.nbytes + agg.prom.nbytes
    agg.extra_view = agg.hist[:3]  # a view of a counted array: nothing more
    agg.extra_list = [np.zeros(1000, np.int64)]  # a list of arrays: walked
    agg.extra_dict = {"x": np.zeros(1000, np.int64)}  # dicts: not walked
    assert array_bytes(agg) == own + 8000


def test_table_bytes_walk_passes_over_leaves_only(monkeypatch):
    """array_bytes passes over lists of leaves (str, int, float, None...) in one look, not
    one Python step per item (issue 21: ~3 ms per flush at 3000 keys), and still walks every
    other item: arrays among leaves, tuples holding arrays."""
    import builtins
    import collections

    import numpy as np
    from aclprofd import memory
    from aclprofd.aggregate.aggregator import Aggregator

    agg = Aggregator(100)
    own = memory.array_bytes(agg)
    agg.keys.name.extend([f"op{i}" for i in range(5000)])  # leaves: nothing, in one look
    steps = []
    monkeypatch.setattr(memory, "id", lambda o: steps.append(1) or builtins.id(o), raising=False)
    assert memory.array_bytes(agg) == own
    assert len(steps) < 1000  # one step per object walked; it was one per name too
    agg.extra_mixed = ["a", 1, 2.5, None, b"x", True, np.zeros(100, np.int64)]  # an array among leaves
    agg.extra_tuples = collections.deque([("k", np.zeros(10, np.int64)), ("k", 3)])  # a tuple of an array
    assert memory.array_bytes(agg) == own + 800 + 80


def test_table_bytes_walk_passes_over_lists_of_leaf_tuples(monkeypatch):
    """A list of tuples of leaves (the detector's cell identities, one per cell) is passed
    over in one look too, not one Python step per tuple (issue 21: 1000 cells were ~1 ms
    of each flush); a tuple among them that holds an array, or a tuple of tuples, is still
    walked into, so the bytes are the same as one step per item gives."""
    import builtins

    import numpy as np
    from aclprofd import memory
    from aclprofd.aggregate.aggregator import Aggregator

    agg = Aggregator(100)
    own = memory.array_bytes(agg)
    agg.extra_cells = [("svc", "op", i, None, 2.5) for i in range(5000)]
    steps = []
    monkeypatch.setattr(memory, "id", lambda o: steps.append(1) or builtins.id(o), raising=False)
    assert memory.array_bytes(agg) == own
    assert len(steps) < 1000  # it was one step per tuple
    agg.extra_cells.append(("svc", np.zeros(10, np.int64)))  # an array in one tuple: walked
    agg.extra_nested = [(("a", 1), ("b", np.zeros(20, np.int64)))]  # tuples of tuples: walked
    assert memory.array_bytes(agg) == own + 80 + 160
