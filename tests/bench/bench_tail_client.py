"""``aclprof tail --json``'s own CPU per record, JSON Lines against binary STREAM records.

    python tests/bench/bench_tail_client.py [--quick] [--records N] [--tail-python PY]

A stand-in daemon on a Unix socket answers each ``aclprof tail --json > /dev/null`` with a
stream made beforehand (N records of a 1000-op model in 2500-record batches from two agents,
as at 100 k ops/s): the daemon's own JSON Lines frames (``encode_frames``, what a JSON stream
carries) or the binary frames of the same records (``aclprof.protocol.streambin``), then END.
The stream is sent as fast as the tail reads it, so what is measured is the tail's CPU
per record from its STREAM request to its close after END (``/proc/PID/schedstat``: its start,
imports and exit left out), not the stand-in's; a shared machine moves it little. Each variant runs once per round, interleaved; ``again`` rows are the same
variant twice (A/A). ``--tail-python`` adds a row for another version's tail (its JSON
stream: a tail before binary streams never asks for them).
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _benchlib as B
from bench_tail_encode import make_batch

from aclprof.protocol import streambin, wire
from aclprof.protocol.recordtext import NameJson, identity_head

BATCH = 2500


def streams(n: int) -> dict[str, bytes]:
    """The bytes of a JSON and of a binary stream of the same ``n`` records (no END)."""
    recs, names = make_batch(BATCH, 1000, t0=1_764_000_000_000_000_000)
    from aclprof.protocol import _jsonl

    agents = [("node-17", 4242, "resnet"), ("node-17", 4343, "bert")]
    js, bs = [], []
    for k, (host, pid, service) in enumerate(agents):
        bs.append(streambin.source_frame(k + 1, host, pid, service))
        bs += streambin.names_frames(k + 1, list(names.items()))
    nj = [NameJson(names) for _ in agents]
    for i in range(max(1, n // BATCH)):
        k = i % len(agents)
        ts = 1.7e9 + i * 0.0125
        head = identity_head(*agents[k])
        js.append(_jsonl.encode_frames(recs, ts, head, nj[k].cache, nj[k], int(wire.Kind.STREAM_RECORDS), 2048,
                                       wire.FRAME_TARGET, wire.MAX_PAYLOAD))
        bs.append(streambin.batch_prefix(k + 1, ts, len(recs)) + recs.tobytes())
    return {streambin.JSONL: b"".join(js), streambin.FORMAT: b"".join(bs)}


class StandIn:
    """Serves one stream per connection: WELCOME (protocol 5, both formats), then the
    prepared bytes of the format the STREAM asked for, then END."""

    def __init__(self, data: dict[str, bytes], records: int):
        self.data, self.records = data, records
        # tail pid -> its CPU seconds on the stream: from its STREAM request to its close after END
        self.cpu: dict[int, float] = {}
        self.done = threading.Condition()
        self.path = os.path.join(tempfile.mkdtemp(prefix="aclp-tc-"), "d.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                reader, pending = wire.FrameReader(), []  # type: ignore[var-annotated]
                wire.recv_frame(conn, reader, pending)  # HELLO
                conn.sendall(wire.encode_json(wire.Kind.WELCOME, {
                    "version": "0.1.0", "protocol": 5, "pid": os.getpid(), "started_ts": 1.0,
                    "stream_formats": list(streambin.FORMATS)}))
                frame = wire.recv_frame(conn, reader, pending)
                if frame is None:
                    continue
                if frame[0] != wire.Kind.STREAM:  # a tail that checks something first (an older one)
                    continue
                fmt = wire.decode_json(frame[1]).get("format", streambin.JSONL)
                pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
                start = _cpu_s(pid)
                conn.sendall(self.data[fmt])
                conn.sendall(wire.encode_json(wire.Kind.END, {"records": self.records, "skipped": 0}))
                conn.shutdown(socket.SHUT_WR)
                try:
                    while conn.recv(4096):
                        pass
                except OSError:
                    pass
                with self.done:  # it closed after END: what it spent since the request (not its exit)
                    self.cpu[pid] = _cpu_s(pid) - start
                    self.done.notify_all()


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid``'s one thread so far, in ns resolution (a zombie's too)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def tail_cpu(stand: StandIn, python: str, wire_arg: list[str], records: int) -> Callable[[], float]:
    """The tail's CPU from its STREAM request to its close after END, per record."""
    def run() -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ACLPROF_", "ACLMOCK_", "ACLPROFD_"))}
        p = subprocess.Popen([python, "-m", "aclprof", "tail", "--json", *wire_arg, "--socket", stand.path], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with stand.done:  # measured before it is reaped (its /proc entry goes then)
            stand.done.wait_for(lambda: p.pid in stand.cpu, timeout=600)
        p.wait()
        return stand.cpu.pop(p.pid) / records * 1e9
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=None, help="records per stream (default 2M, quick 500k)")
    parser.add_argument("--tail-python", default=None, help="another version's python: its tail's JSON row too")
    args = parser.parse_args(argv)
    n = (args.records or (500_000 if args.quick else 2_000_000)) // BATCH * BATCH
    rounds = 3 if args.quick else 5
    data = streams(n)
    stand = StandIn(data, n)
    me = sys.executable
    variants = {"json (--wire jsonl)": tail_cpu(stand, me, ["--wire", "jsonl"], n),
                "json again": tail_cpu(stand, me, ["--wire", "jsonl"], n),
                "binary": tail_cpu(stand, me, [], n),
                "binary again": tail_cpu(stand, me, [], n)}
    if args.tail_python:
        variants["other tail (json)"] = tail_cpu(stand, args.tail_python, [], n)
    B.header(f"aclprof tail --json: its CPU ns per record ({n:,} records, {BATCH}-record batches, 2 agents)",
             args.quick)
    samples = B.interleaved(variants, rounds)
    rows = [(name, B.med(v), min(v), f"{B.med(B.per_round_ratio(samples, name, 'json (--wire jsonl)')):.3f}x")
            for name, v in samples.items()]
    B.table(("variant", "CPU ns/record (median)", "min", "vs json (per round)"), rows)
    print(f"\nstream bytes per record: json {len(data[streambin.JSONL]) / n:.0f}, "
          f"binary {len(data[streambin.FORMAT]) / n:.1f}")
    stand.listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
