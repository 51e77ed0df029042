"""An agent that lies about who it is (issue 19, items 7 and 9), as its own process so that it
can run as another user and in its own pid namespace (``unshare -Urpf``).

``python impostor.py SOCKET --pid N --service S [--records K] [--on-trace forge|silent]``:
HELLO with the stated pid and service, NAMES and K records, then ``{"ready": true, "pid":
<own pid as it sees it>}`` on stdout. On TRACE_START: ``forge`` answers TRACE_DONE with
directories it claims (``--dirs``), ``silent`` never answers. Exits when stdin closes.
Only ``aclprof.protocol`` and numpy: it must start as a user without the tests' fixtures.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import sys
import time

import numpy as np

from aclprof.protocol.wire import RECORD_DTYPE, FrameReader, Kind, decode_json, encode_batch, encode_json, encode_names


def _records(n: int) -> np.ndarray:
    r = np.zeros(n, RECORD_DTYPE)
    r["model_id"], r["op_type"], r["op_name"], r["duration"] = 9, 1, 2, 777
    r["end"] = time.monotonic_ns()
    r["start"] = r["end"] - 777
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--service", default=None)
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--on-trace", choices=("forge", "silent"), default="silent")
    ap.add_argument("--dirs", default="/var/lib/victim/PROF_forged")
    args = ap.parse_args(argv)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(args.socket)
    sock.sendall(encode_json(Kind.HELLO, {"role": "agent", "version": "0.1.0", "pid": args.pid,
                                          "host": socket.gethostname(), "service": args.service, "labels": {}}))
    reader = FrameReader()
    pending: list[tuple[Kind, bytes]] = []

    def frames() -> bool:
        data = sock.recv(65536)
        if not data:
            return False
        pending.extend((Kind(k), bytes(p)) for k, p in reader.feed(data))
        return True

    while not pending:
        if not frames():
            print(json.dumps({"error": "closed before WELCOME"}), flush=True)
            return 1
    assert pending.pop(0)[0] == Kind.WELCOME
    for frame in encode_names({1: "ForgedType", 2: "forged_op"}):
        sock.sendall(frame)
    if args.records:
        sock.sendall(encode_batch(_records(args.records)))
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    while True:
        ready, _, _ = select.select([sock, sys.stdin], [], [])
        if sys.stdin in ready and not sys.stdin.readline():
            return 0
        if sock in ready:
            if not frames():
                return 0
            for kind, payload in pending:
                if kind == Kind.TRACE_START and args.on_trace == "forge":
                    tid = decode_json(payload)["trace_id"]
                    sock.sendall(encode_json(Kind.TRACE_DONE, {"trace_id": tid, "dirs": [args.dirs],
                                                               "pause_ns": 1, "models": [9]}))
            pending.clear()


if __name__ == "__main__":
    sys.exit(main())
