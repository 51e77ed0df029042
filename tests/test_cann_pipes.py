"""CANN's pipe writer and exit path (issue 22, "The real library set"), on the mock's CANN
writer (``ACLMOCK_PIPE_WRITER=cann``: no SIGPIPE blocking, short writes not continued).

Each case runs in a child interpreter whose SIGPIPE disposition is the default, as an embedding
application may restore it (Python itself ignores SIGPIPE): a write into a pipe whose read end
is closed would kill it. The binding blocks SIGPIPE in the thread that calls
``aclprofModelSubscribe``, whose writer threads inherit the mask (CANN's uploaders are created
there), and never closes a read end while the library may write; at exit its handler is the
only cleanup (CANN's exit handler skips subscribe mode and closes no fd).
"""

from __future__ import annotations

import json
import signal

# Raw lowlevel: a pipe whose read end is closed before the model runs. `direct` calls the C
# function without the binding's guard (the control: proves the mock's writer is deadly).
CLOSED_READER = r"""
import os, signal, sys, json
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
import aclprof
from aclprof import mock
from aclprof.binding import lowlevel as ll
from aclprof.binding.loader import get_library
model = mock.load_model([{"name": "a", "type": "A", "duration_ns": 100}] * 3)
r, w = os.pipe()
cell = ll.FdCell(w)
cfg = ll.create_subscribe_config(True, 255, cell)
os.close(r)
if sys.argv[1] == "direct":
    rc = get_library().fn("aclprofModelSubscribe")(model, cfg._get())
    assert rc == 0, rc
else:
    ll.model_subscribe(model, cfg)
mock.execute(model, 2)
mock.wait_writer_idle(5.0)
st = mock.stats()
print(json.dumps({"emitted": st["recordsEmitted"], "dropped": st["recordsDropped"],
                  "written": st["recordsWritten"]}))
"""


def _cann_env(make_env, **extra: str) -> dict[str, str]:
    return make_env(ACLPROF_BACKEND="mock", ACLMOCK_PIPE_WRITER="cann", **extra)


def test_sigpipe_default_cannot_kill_through_a_subscription(run_python, make_env):
    env = _cann_env(make_env)
    guarded = run_python("", env=env, args=["-c", CLOSED_READER, "binding"])
    assert guarded.returncode == 0, guarded.stderr
    out = json.loads(guarded.stdout.strip().splitlines()[-1])
    assert out == {"emitted": 6, "dropped": 6, "written": 0}  # EPIPE: dropped and counted
    direct = run_python("", env=env, args=["-c", CLOSED_READER, "direct"])
    assert direct.returncode == -signal.SIGPIPE, (direct.returncode, direct.stderr)


# Live subscriptions on three devices (two models on device 0), each with a callback; the
# process exits with them open. The check runs in an atexit handler registered before
# aclprof's, so it runs after aclprof's own (atexit is last in, first out).
EXIT_WITH_LIVE = r"""
import atexit, json, os, signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_DFL)

def pipes():
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                out.add(int(fd))
        except OSError:
            pass
    return out

baseline = pipes()
got = {}

def uploaders():
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().startswith("MSVP_Upld")
        except FileNotFoundError:  # it ended between the listing and the open: not live
            pass
    return n

counts = {}

def uploaders_after_joins():
    # A joined thread stays listed in /proc/self/task for a moment after pthread_join returns
    # (the kernel wakes the joiner before it unlists the task): wait up to 2 s for the count
    # to reach 0; one that really stays is still counted.
    deadline = time.monotonic() + 2.0
    while (n := uploaders()) and time.monotonic() < deadline:
        time.sleep(0.001)
    return n

def report():
    from aclprof import mock
    st = mock.stats()
    print(json.dumps({"got": got, "uploaders_live": counts["live"], "uploaders_after": uploaders_after_joins(),
                      "emitted": st["recordsEmitted"], "written": st["recordsWritten"],
                      "dropped": st["recordsDropped"], "pipes_left": sorted(pipes() - baseline)}),
          flush=True)

atexit.register(report)
import aclprof
from aclprof import mock
ops = [{"name": f"op{i}", "type": "T", "duration_ns": 1000} for i in range(4)]
subs = []
for i, device in enumerate((0, 0, 1, 2)):
    model = mock.load_model(ops, device=device)
    key = f"{device}/{model}"
    got[key] = 0
    def count(rec, key=key):
        got[key] += 1
    subs.append(aclprof.subscribe(model, callback=count, device=device))
    mock.execute(model, 25)
counts["live"] = uploaders()
sys.exit(0)  # the subscriptions are still open
"""


def test_exit_with_live_subscriptions_on_several_devices(run_python, make_env):
    for threads in ("one", "cann"):
        proc = run_python(EXIT_WITH_LIVE, env=_cann_env(make_env, ACLMOCK_THREADS=threads), timeout=30)
        assert proc.returncode == 0, (threads, proc.returncode, proc.stderr)
        assert proc.stdout.strip(), (threads, "the exit report printed nothing", proc.stderr)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["emitted"] == 4 * 4 * 25 and out["written"] == out["emitted"] and out["dropped"] == 0
        assert sorted(out["got"].values()) == [100, 100, 100, 100], out  # every record delivered
        assert out["pipes_left"] == [], out  # every subscription pipe closed by aclprof's handler
        # CANN's shape: two uploaders per device (0, 1, 2) and two for the host, all gone at the end
        assert (out["uploaders_live"], out["uploaders_after"]) == ((8, 0) if threads == "cann" else (0, 0))


# An API session whose response thread waits for a device that never answers (30 s, CANN's
# DeviceResponseHandler): exit must not wait for it. The 20 s timeout is the hang check.
EXIT_IN_SESSION = r"""
import os, sys
import aclprof
from aclprof.binding import lowlevel as ll
ll.init(sys.argv[1])
ll.start(ll.create_config([0], 0xFF, int(aclprof.DataType.ACL_API)))
def comm(tid):
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except FileNotFoundError:  # the thread ended after the listing
        return None
names = [comm(t) for t in os.listdir("/proc/self/task")]
print(names.count("DevRespHandler"), flush=True)
sys.exit(0)  # started, never stopped
"""


def test_exit_with_a_session_and_a_waiting_response_thread(run_python, make_env, tmp_path):
    proc = run_python("", env=_cann_env(make_env, ACLMOCK_THREADS="cann"), timeout=20,
                      args=["-c", EXIT_IN_SESSION, str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1"]


# The one path where aclprof closes a read end while the library keeps the write end: an
# unsubscribe the library refused (it may still own the subscription, so the write end and
# the fd cell stay with it). The library's later records then meet a closed read end.
FAILED_UNSUBSCRIBE = r"""
import json, signal
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
import aclprof
from aclprof import mock
model = mock.load_model([{"name": "a", "type": "A", "duration_ns": 100}] * 2)
got = []
sub = aclprof.subscribe(model, callback=got.append)
mock.execute(model, 3)
mock.wait_writer_idle(5.0)
mock.fail_next("aclprofModelUnSubscribe", 1, 500005)
try:
    sub.close(timeout=5.0)
    raised = False
except aclprof.AclError as exc:
    raised = exc.code == 500005
mock.execute(model, 2)  # still subscribed in the library; its read end is gone
mock.wait_writer_idle(5.0)
st = mock.stats()
print(json.dumps({"raised": raised, "delivered": len(got), "emitted": st["recordsEmitted"],
                  "written": st["recordsWritten"], "dropped": st["recordsDropped"]}))
"""


def test_refused_unsubscribe_then_records_cannot_kill(run_python, make_env):
    proc = run_python(FAILED_UNSUBSCRIBE, env=_cann_env(make_env), timeout=30)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the 6 records before the close were delivered; the 4 after it met EPIPE, dropped and counted
    assert out == {"raised": True, "delivered": 6, "emitted": 10, "written": 6, "dropped": 4}


# fork: the forked child drops its copies of the read end (the parent's stays open, so the
# library's writes into the parent's pipe never meet a closed read end); a stuck callback
# keeps its read end until it returns, past close() and exit, which does not wait for it.
FORK_AND_STUCK = r"""
import json, os, signal, sys, threading
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
import aclprof
from aclprof import mock
ops = [{"name": "a", "type": "A", "duration_ns": 100}] * 2
m1, m2 = mock.load_model(ops, device=0), mock.load_model(ops, device=1)
got, release = [], threading.Event()
sub = aclprof.subscribe(m1, callback=got.append, device=0)
stuck = aclprof.subscribe(m2, callback=lambda r: release.wait(), device=1)
mock.execute(m1, 5)
mock.execute(m2, 5)
pid = os.fork()
if pid == 0:
    os._exit(0)  # the child: nothing of the parent's subscriptions to close
_, status = os.waitpid(pid, 0)
mock.execute(m1, 5)  # written into the parent's pipe after the child closed its copy
sub.close(timeout=5.0)
stuck.close(timeout=0.2)  # gives up: its reader is in the callback, holding the read end
print(json.dumps({"child": status, "got": len(got), "stuck": stuck.stats.reader_stuck}), flush=True)
sys.exit(0)  # with the callback still stuck
"""


def test_fork_and_a_stuck_callback_keep_the_read_end(run_python, make_env):
    proc = run_python(FORK_AND_STUCK, env=_cann_env(make_env, ACLMOCK_THREADS="cann"), timeout=30)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"child": 0, "got": 20, "stuck": True}
