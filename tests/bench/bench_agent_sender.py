"""The agent's own cost per record: CPU time of its sender thread (convert + frame + send).

    python tests/bench/bench_agent_sender.py [--records N] [--ops K] [--repeat R]

In one process: a mock model of ``K`` ops (no realtime sleeps) is watched by
``aclprof.agent``, which streams to an in-process sink (a thread that completes the
handshake and drains the socket). ``N`` records are emitted; the figure is the CPU time
of the thread named ``aclprof-agent`` (``pthread_getcpuclockid``) from the first record
to the last one written, divided by ``N``. The subscription's reader threads and the sink
are not counted. The median of ``R`` runs is printed in ns/record. Every record must
arrive (no drops: the buffer holds all ``N``), else the run fails.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("ACLPROF_BACKEND", "mock")

from bench_distortion import make_ops


class Sink:
    """Completes the agent's handshake, then reads and discards everything."""

    def __init__(self, path: str):
        from aclprof.protocol import wire

        self.wire = wire
        self.bytes = 0
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        wire = self.wire
        try:
            conn, _ = self.srv.accept()
        except OSError:
            return
        buf = bytearray(1 << 20)
        reader = wire.FrameReader()
        got = conn.recv_into(buf)
        assert any(k == wire.Kind.HELLO for k, _ in reader.feed(bytes(buf[:got])))
        conn.sendall(wire.encode_json(wire.Kind.WELCOME, {"version": "0", "protocol": 1, "pid": 0,
                                                          "started_ts": 0.0}))
        while True:
            n = conn.recv_into(buf)
            if not n:
                return
            self.bytes += n

    def close(self) -> None:
        try:
            self.srv.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.srv.close()


def _sender_clock() -> int:
    for t in threading.enumerate():
        if t.name == "aclprof-agent" and t.ident is not None:
            return time.pthread_getcpuclockid(t.ident)
    raise RuntimeError("no aclprof-agent thread")


def run_once(records: int, ops: int) -> float:
    import aclprof
    from aclprof import agent, mock

    aclprof.use_mock()
    mock.set_realtime(False)
    model = mock.load_model(make_ops(ops, 1000))
    with tempfile.TemporaryDirectory(prefix="aclp-bench-") as root:
        path = os.path.join(root, "s.sock")
        sink = Sink(path)
        a = agent.start(path, buffer_records=records + ops)
        try:
            while not a.stats().connected:
                time.sleep(0.01)
            agent.watch(model)
            clock = _sender_clock()
            wait_idle = time.monotonic() + 5
            while a.stats().frames_sent < 1 and time.monotonic() < wait_idle:  # the WATCH frame
                time.sleep(0.01)
            cpu0 = time.clock_gettime_ns(clock)
            # In chunks: the mock's pipe writer drops what a busy reader leaves behind.
            for _ in range(records // ops // 20):
                mock.execute(model, 20)
                mock.wait_writer_idle()
            deadline = time.monotonic() + 120
            while (st := a.stats()).records_sent < st.records_in or st.buffered:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {st} sent")
                time.sleep(0.002)
            cpu = time.clock_gettime_ns(clock) - cpu0
            assert st.dropped == 0 and st.records_sent >= records // 2, st
        finally:
            agent.stop(timeout=5.0)
            sink.close()
    mock.unload(model)
    return cpu / st.records_sent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--ops", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    runs = [run_once(args.records, args.ops) for _ in range(args.repeat)]
    print(f"agent sender CPU: {statistics.median(runs):.1f} ns/record (median of {len(runs)}; "
          f"runs {', '.join(f'{r:.1f}' for r in runs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
