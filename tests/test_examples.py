"""examples/simulated_service.py, as the README tells a user to run it: against a real aclprofd,
its records arrive (``aclprof status`` lists the service while it runs) and every record the
mock emitted is accounted for."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from helpers.daemons import running
from helpers.procs import REPO, cli, env, short_tmpdir, wait_for

EXAMPLE = str(REPO / "examples" / "simulated_service.py")


def test_simulated_service_streams_to_a_real_daemon() -> None:
    root = short_tmpdir()
    with running(root) as daemon:
        # until stopped (no --duration): a loaded machine's slow `aclprof status` cannot miss it
        proc = subprocess.Popen([sys.executable, EXAMPLE, "--socket", daemon.socket, "--service", "example-svc",
                                 "--rate", "200"],
                                env=env(), cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            def streaming() -> dict | None:
                assert proc.poll() is None, f"the example exited {proc.returncode}: {proc.communicate()}"
                st = json.loads(cli("status", "--json", "--socket", daemon.socket).stdout)
                return next((a for a in st["agents"] if a["service"] == "example-svc" and a["records"] > 0), None)

            agent = wait_for(streaming, timeout=30, interval=0.1, what="the example's records in aclprof status")
            assert agent["models"][0]["labels"] == {"model": "simulated-cnn"}
            proc.send_signal(signal.SIGTERM)  # as a service manager stops it: flushed, summary printed, exit 0
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["inferences"] > 0 and summary["emitted"] > 0
        # a daemon there all along: nothing dropped, everything emitted was sent and read
        assert (summary["sent"], summary["dropped"]) == (summary["emitted"], 0), summary
        wait_for(lambda: daemon.status()["records_total"] == summary["sent"], timeout=10,
                 what=f"records_total == {summary['sent']}")


def test_simulated_service_refuses_bad_options_with_exit_2() -> None:
    for args in (["--rate", "nan"], ["--duration", "-1"], ["--ops", "/nonexistent/ops.json"], ["--device", "x"]):
        proc = subprocess.run([sys.executable, EXAMPLE, *args], env=env(), capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "simulated_service.py: error:" in proc.stderr and args[0] in proc.stderr, proc.stderr
