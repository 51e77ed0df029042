"""``python -m aclprof.demo`` runs end to end on the bundled mock and prints its summary."""

from __future__ import annotations

import json
import re


def test_demo_runs_and_prints_the_summary(run_python, make_env, tmp_path):
    out = tmp_path / "demo-out"
    # No ACLPROF_BACKEND: the demo selects the mock itself.
    proc = run_python("", env=make_env(), args=["-m", "aclprof.demo", "--steps", "5", "--output", str(out)])
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("library: aclprof mock libascendcl (")
    (prof_dir,) = [p for p in out.iterdir() if p.name.startswith("PROF_")]
    assert f"\n{prof_dir}\n" in text
    assert "  devices: device_0, device_1\n" in text
    assert "  msproftx events: mark=5, range=20, step=10\n" in text
    assert re.search(r"^  inference step\s+5\s+[\d.]+\s+[\d.]+$", text, re.M)
    assert re.search(r"^  forward\s+5\s", text, re.M)
    # The summary is what the mock wrote.
    events = [json.loads(line) for line in (prof_dir / "host" / "msproftx.jsonl").read_text().splitlines()]
    assert len(events) == 5 + 15 + 5 + 10
    # Annotations are ranges too (aclprof.api.markers pairs them per thread by range id); the
    # requests are the ones ended on another thread.
    ranges = [e for e in events if e["kind"] == "range" and e["start_tid"] != e["end_tid"]]
    assert sorted(e["message"] for e in ranges) == [f"request {i}" for i in range(5)]


def test_demo_help(run_python, make_env):
    proc = run_python("", env=make_env(), args=["-m", "aclprof.demo", "--help"])
    assert proc.returncode == 0 and "--steps" in proc.stdout


def test_demo_into_head_exits_0_quietly(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, ACLPROF_BACKEND="mock")
    proc = subprocess.run(["bash", "-c", f'"{sys.executable}" -m aclprof.demo --steps 2 --output "{tmp_path}/o" '
                           '| head -1; echo "rc=${PIPESTATUS[0]}"'],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.stdout.splitlines()[-1] == "rc=0", proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
