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
The ``binary`` rows are the same with a client that asked for binary records
(aclprof.protocol.streambin), and ``client render (binary)`` what ``aclprof tail`` spends per
record to write those as JSON Lines (skipped by a version without binary STREAM).
Run it with another venv's python to measure another version with the same script.
"""

from __future__ import annotations

import argparse
import inspect
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
    # as ingest offers a batch: an array over the bytes it keeps (the binary stream queues them)
    recs = np.frombuffer(recs.tobytes(), dtype=recs.dtype)
    binary_too = "binary" in inspect.signature(Fanout.start_stream).parameters  # not in older versions
    junk = np.ones(4 << 20, np.uint8)
    ts = [1.7e9]
    agent_sock, _a2 = socket.socketpair()

    def drain(sock: socket.socket) -> None:
        buf = bytearray(1 << 20)
        while sock.recv_into(buf):
            pass

    def setup(binary: bool) -> tuple[Fanout, Conn, Conn, Outbox]:
        conns: dict[int, Conn] = {}
        outbox = Outbox(conns)
        host = SimpleNamespace(settings=SimpleNamespace(stream_buffer_bytes=8 << 20), storage=None)
        memory = Memory(conns, 512 << 20, {}, rss=lambda: 50 << 20)
        memory.start()
        fan = Fanout(host, outbox, SimpleNamespace(stream_skipped_total=0), memory)  # type: ignore[arg-type]
        b, b2 = socket.socketpair()
        b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        threading.Thread(target=drain, args=(b2,), daemon=True).start()
        agent = Conn(agent_sock, "a1")
        agent.role, agent.host, agent.pid, agent.service = "agent", "node-17", 4242, "resnet"
        agent.names = dict(names)
        agent.names_order = list(names.items())
        client = Conn(b, "c1")
        client.role = "control"
        conns[1], conns[2] = agent, client
        if binary:
            fan.start_stream(client, Filter(), binary=True)
        else:
            fan.start_stream(client, Filter())
        return fan, agent, client, outbox

    def variant(where: tuple[Fanout, Conn, Conn, Outbox], send: bool) -> Callable[[], float]:
        fan, agent, _client, outbox = where

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

    json_mode = setup(False)
    variants = {"send": variant(json_mode, True), "send again": variant(json_mode, True),
                "no send": variant(json_mode, False), "no send again": variant(json_mode, False)}
    bin_mode = setup(True) if binary_too else None
    if bin_mode is not None:
        variants.update({"binary send": variant(bin_mode, True), "binary send again": variant(bin_mode, True),
                         "binary no send": variant(bin_mode, False)})
        variants["client render (binary)"] = render_variant(bin_mode[0], bin_mode[1], recs, args.batches, junk)
    for v in variants.values():  # warm-up: name tables, buffers
        v()
    B.header("the daemon's STREAM path: CPU ns per record (offer + pump, 1000-record batches)", args.quick)
    samples = B.interleaved(variants, rounds)
    rows = [(name, B.med(v), min(v), f"{B.med(B.per_round_ratio(samples, name, 'send')):.3f}x")
            for name, v in samples.items()]
    B.table(("variant", "CPU ns/record (median)", "min", "vs send (per round)"), rows)
    if bin_mode is None:
        print("\n(this version has no binary STREAM: JSON rows only)")
    else:
        print("\n'client render (binary)': aclprof tail's side of a binary stream, the frames decoded and "
              "written as JSON Lines (StreamDecoder), per record")
    for label, where in (("json", json_mode), ("binary", bin_mode)):
        if where is not None:
            print(f"{label}: records sent {where[2].stream_sent:,}, skipped {where[2].stream_skipped_all:,}")
    return 0


def render_variant(fan: Fanout, agent: Conn, recs: np.ndarray, batches: int, junk: np.ndarray) -> Callable[[], float]:
    """The client's CPU per record for a binary stream: the daemon's frames for one batch,
    made once, decoded and rendered as a tail does (the source and names frames first)."""
    from aclprof.protocol.streambin import StreamDecoder
    from aclprof.protocol.wire import FrameReader

    def frames() -> list:
        conn = Conn(socket.socketpair()[0], "cx")
        conn.role = "control"
        fan.outbox.conns[99] = conn
        fan.start_stream(conn, Filter(), binary=True)  # type: ignore[call-arg]
        conn.stream_pending.append((agent, 1.7e9, recs))
        conn.stream_pending_n = len(recs)
        fan.outbox.send = lambda c: None  # type: ignore[method-assign]  # the frames stay in conn.out
        fan._pump_binary(conn, [1 << 40, 1 << 40])
        del fan.outbox.send
        data = bytes(conn.out)
        conn.out.clear()
        fan.closed(conn)
        del fan.outbox.conns[99]
        return [(k, bytes(p)) for k, p in FrameReader().feed(data)]

    got = frames()
    head, batch = got[:-1], got[-1]

    def run() -> float:
        dec = StreamDecoder()
        for k, p in head:
            dec.frame(k, p)
        cpu = 0.0
        for _ in range(batches):
            junk[::64] += 1
            t0 = time.thread_time()
            for _text in dec.frame(*batch):  # rendered into the decoder's buffer, piece by piece
                pass
            cpu += time.thread_time() - t0
        return cpu / batches / len(recs) * 1e9
    return run


if __name__ == "__main__":
    sys.exit(main())
