"""The daemon's STREAM path per record, in process: ``Fanout.offer`` + ``pump_streams``.

    python tests/bench/bench_stream_pump.py [--quick] [--batches N]

One agent (1000 ops named like ``layer3/op31``, 19-digit ns times), one unfiltered STREAM
client, 1000-record batches as an agent sends at 100 k ops/s while LIVE. Each batch is
offered and pumped as the loop does: the budget check, the C encoder, the Python around it,
and (variant ``send``) the ``sendmsg`` into a socketpair whose other end a thread drains;
variant ``no send`` drops the frames instead. 4 MB of memory is written between batches,
as the daemon's other work does between an agent's batches: the encoder's tables are read
back from memory, not from a warm cache (a warm-cache loop hid the miss that cost the
daemon most of its encoding, issue 21). Reported: CPU ns per record of this thread (the
machine may be shared), median of rounds, the ``again`` rows the same variant twice (A/A).
Run it with another venv's python to measure another version with the same script.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B
import numpy as np
from aclprofd.conn import Conn
from aclprofd.fanout import Fanout
from aclprofd.filters import Filter
from aclprofd.memory import Memory
from bench_tail_encode import make_batch


class Outbox:
    """The transport's part: send what the socket takes (``send``) or drop it."""

    def __init__(self, conns: dict[int, Conn]):
        self.conns, self.really = conns, True

    def send(self, c: Conn) -> None:
        if not self.really:
            c.out.clear()
            return
        while c.out:
            c.out.send(c.sock)

    def queue(self, c: Conn, frame: bytes) -> None:
        pass

    def internal_error(self, c: Conn, what: str, exc: Exception) -> None:
        raise exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int, default=300, help="batches per sample")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 9
    recs, names = make_batch(1000, 1000, t0=1_764_000_000_000_000_000)  # 19-digit ns times, as CLOCK_REALTIME
    conns: dict[int, Conn] = {}
    outbox = Outbox(conns)
    host = SimpleNamespace(settings=SimpleNamespace(stream_buffer_bytes=8 << 20), storage=None)
    memory = Memory(conns, 512 << 20, {}, rss=lambda: 50 << 20)
    memory.start()
    fan = Fanout(host, outbox, SimpleNamespace(stream_skipped_total=0), memory)  # type: ignore[arg-type]
    a, _a2 = socket.socketpair()
    b, b2 = socket.socketpair()
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)

    def drain() -> None:
        buf = bytearray(1 << 20)
        while b2.recv_into(buf):
            pass

    threading.Thread(target=drain, daemon=True).start()
    agent = Conn(a, "a1")
    agent.role, agent.host, agent.pid, agent.service = "agent", "node-17", 4242, "resnet"
    agent.names = dict(names)
    client = Conn(b, "c1")
    client.role = "control"
    conns[1], conns[2] = agent, client
    fan.start_stream(client, Filter())
    junk = np.ones(4 << 20, np.uint8)
    ts = [1.7e9]

    def variant(send: bool) -> Callable[[], float]:
        def run() -> float:
            outbox.really = send
            cpu = 0.0
            for _ in range(args.batches):
                junk[::64] += 1  # a write to every cache line: other work between batches
                ts[0] += 0.01
                t0 = time.thread_time()
                fan.offer(agent, recs, ts[0])
                fan.pump_streams()
                cpu += time.thread_time() - t0
            return cpu / args.batches / len(recs) * 1e9
        return run

    variant(True)()  # warm-up: name tables, buffers
    B.header("the daemon's STREAM path: CPU ns per record (offer + pump, 1000-record batches)", args.quick)
    samples = B.interleaved({"send": variant(True), "send again": variant(True), "no send": variant(False),
                             "no send again": variant(False)}, rounds)
    rows = [(name, B.med(v), min(v), f"{B.med(B.per_round_ratio(samples, name, 'send')):.3f}x")
            for name, v in samples.items()]
    B.table(("variant", "CPU ns/record (median)", "min", "vs send (per round)"), rows)
    print(f"\nrecords sent: {client.stream_sent:,}, skipped: {client.stream_skipped_all:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
