"""The pipe's write fd and its C int across devices (audit row 1, note D1).

CANN's ProfStopAclSubscribe closes a model's fd at unsubscribe only if the model's device
keeps other subscriptions or if it was the process's last subscription; otherwise (the
device's last subscription while another device still has one) it keeps the int* and
closes the fd, writing -1 through the pointer, when the last subscription ends. The mock
does the same; these tests check that the binding keeps the cell alive for that long,
still ends each reader promptly with every record, and never touches an unrelated fd.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest
from helpers.procs import open_fds
from helpers.records import record_key

import aclprof
from aclprof import mock
from aclprof.api import subscription
from aclprof.api.subscription import lifetime
from aclprof.compat import acl

pytestmark = pytest.mark.usefixtures("no_leaks")

OPS = [
    {"name": "conv", "type": "Conv2D", "duration_ns": 2000, "jitter": 100},
    {"name": "relu", "type": "Relu", "duration_ns": 300},
    {"name": "fc", "type": "MatMulV2", "duration_ns": 1500, "flag": 1},
]


def two_models() -> tuple[int, int]:
    a = mock.load_model([dict(op, name="a_" + op["name"]) for op in OPS], device=0)
    b = mock.load_model([dict(op, name="b_" + op["name"]) for op in OPS], device=1)
    return a, b


def is_deferred(cell) -> bool:
    return any(c is cell for c in lifetime._deferred_cells)


def test_unsubscribe_one_device_while_the_other_streams(emit_log):
    a, b = two_models()
    sub_a = aclprof.subscribe(a, device=0)
    sub_b = aclprof.subscribe(b, device=1)
    write_a = sub_a._cell.value
    stop = threading.Event()

    def stream_b() -> None:
        while not stop.is_set():
            mock.execute(b, 5)

    streamer = threading.Thread(target=stream_b)
    streamer.start()
    try:
        mock.execute(a, 40)
        t0 = time.monotonic()
        sub_a.close()
        took = time.monotonic() - t0
        # The library deferred the close (dev1 is still subscribed): the binding closed the
        # write end itself, so the reader ended at once, and marked the cell, which it keeps.
        cell_a = sub_a._cell
        assert cell_a.value <= -2
        assert is_deferred(cell_a)
        with pytest.raises(OSError):
            fcntl.fcntl(write_a, fcntl.F_GETFD)
        assert took < 2.0, f"close took {took:.2f} s"
        # An unrelated pipe opened now likely reuses the closed number: the library must
        # neither write to it nor close it.
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        time.sleep(0.05)
    finally:
        stop.set()
        streamer.join()
    try:
        sub_b.close()
        # The last unsubscribe: the library's deferred close went through our cell and
        # wrote -1 there; the binding then forgot the cell.
        assert cell_a.value == -1
        assert not is_deferred(cell_a)
        assert lifetime._deferred_cells == []
        fcntl.fcntl(r, fcntl.F_GETFD)
        fcntl.fcntl(w, fcntl.F_GETFD)
        with pytest.raises(BlockingIOError):
            os.read(r, 1)
    finally:
        os.close(r)
        os.close(w)
    emitted = emit_log.read()
    assert [record_key(x) for x in sub_a] == [e.key() for e in emitted if e.model_id == a]
    assert [record_key(x) for x in sub_b] == [e.key() for e in emitted if e.model_id == b]
    assert sub_a.stats.records_read == 40 * len(OPS)
    assert sub_b.stats.records_read > 0
    assert sub_a.stats.truncated_bytes == sub_b.stats.truncated_bytes == 0
    assert mock.mode() == "OFF"


@pytest.mark.parametrize("order", ["a_first", "b_first"])
def test_many_cycles_no_fd_leak_and_no_lost_record(emit_log, order):
    a, b = two_models()
    baseline = open_fds()
    for cycle in range(25):
        sub_a = aclprof.subscribe(a, device=0)
        sub_b = aclprof.subscribe(b, device=1)
        mock.execute(a, 3)
        mock.execute(b, 2)
        first, second = (sub_a, sub_b) if order == "a_first" else (sub_b, sub_a)
        first.close()
        assert first._cell.value <= -2 and is_deferred(first._cell)
        second.close()
        assert first._cell.value == second._cell.value == -1
        assert lifetime._deferred_cells == []
        assert open_fds() == baseline, f"cycle {cycle}"
        assert sub_a.stats.records_read == 3 * len(OPS)
        assert sub_b.stats.records_read == 2 * len(OPS)
    emitted = emit_log.read()
    assert len(emitted) == 25 * 5 * len(OPS)
    assert mock.stats()["recordsWritten"] == len(emitted)


def test_long_lived_subscription_on_another_device(emit_log):
    """Cycling one device while another stays subscribed: every cycle is deferred by the
    library, yet no fd is held (the binding closes it) and only one cell per cycle is
    kept, all released by the last unsubscribe."""
    _, b = two_models()
    sub_b = aclprof.subscribe(b, device=1)
    baseline = open_fds()
    cells, models = [], []
    for _ in range(30):
        # A new model each time: re-subscribing a deferred model on an idle device is the
        # trap of test_resubscribe_while_the_close_is_deferred.
        a = mock.load_model(OPS, device=0)
        models.append(a)
        with aclprof.subscribe(a, device=0) as sub_a:
            mock.execute(a, 2)
        assert sub_a.stats.records_read == 2 * len(OPS)
        cells.append(sub_a._cell)
        assert open_fds() == baseline
    assert len({c.value for c in cells}) == 30 and max(c.value for c in cells) <= -2
    assert all(is_deferred(c) for c in cells)
    sub_b.close()
    assert [c.value for c in cells] == [-1] * 30
    assert lifetime._deferred_cells == []
    assert all(len(emit_log.read(a)) == 2 * len(OPS) for a in models)


def test_one_device_closes_at_once(emit_log):
    a = mock.load_model(OPS, device=0)
    b = mock.load_model(OPS, device=0)
    sub_a = aclprof.subscribe(a, device=0)
    sub_b = aclprof.subscribe(b, device=0)
    mock.execute(a, 2)
    sub_a.close()
    assert sub_a._cell.value == -1  # written by the library: nothing to keep
    assert not is_deferred(sub_a._cell)
    sub_b.close()
    assert sub_b._cell.value == -1
    assert sub_a.stats.records_read == 2 * len(OPS)


def _read_until_eof(fd: int, out: list[bytes], done: threading.Event) -> None:
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        out.append(chunk)
    done.set()


def test_pyacl_c_style_reader_gets_eof_only_at_the_last_unsubscribe(emit_log):
    """pyACL code that reads until EOF: on CANN (and the mock) a model unsubscribed while
    another device stays subscribed gets its EOF only when that one ends too."""
    a, b = two_models()
    size, _ = acl.prof.get_op_desc_size()
    pipes = [os.pipe(), os.pipe()]
    readers, got, done = [], [[], []], [threading.Event(), threading.Event()]
    configs = []
    for i, (model, (r, w)) in enumerate(zip((a, b), pipes)):
        cfg = acl.prof.create_subscribe_config(1, 0xFF, w)
        assert cfg
        configs.append(cfg)
        assert acl.prof.model_subscribe(model, cfg) == 0
        t = threading.Thread(target=_read_until_eof, args=(r, got[i], done[i]))
        t.start()
        readers.append(t)
    mock.execute(a, 4)
    mock.execute(b, 4)
    assert acl.prof.model_unsubscribe(a) == 0
    assert not done[0].wait(0.3)  # no EOF yet: the library keeps dev0's fd open
    assert acl.prof.model_unsubscribe(b) == 0
    assert done[0].wait(5) and done[1].wait(5)
    for t in readers:
        t.join()
    for i, model in enumerate((a, b)):
        data = b"".join(got[i])
        assert len(data) == size * 4 * len(OPS) == size * len(emit_log.read(model))
    for cfg in configs:
        assert acl.prof.destroy_subscribe_config(cfg) == 0
    for r, _ in pipes:
        os.close(r)


def test_resubscribe_while_the_close_is_deferred(emit_log):
    """CANN would accept it but route the records to the old (closed) cell and then fail
    the unsubscribe, keeping every fd open: the binding refuses it up front."""
    a, b = two_models()
    sub_b = aclprof.subscribe(b, device=1)
    with aclprof.subscribe(a, device=0):
        mock.execute(a, 1)
    with pytest.raises(subscription.DeferredResubscribeError, match="aclprofModelSubscribe"):
        aclprof.subscribe(a, device=0)
    assert mock.stats()["recordsEmitted"] == len(OPS)  # the library was not called
    # With another subscription on device 0, CANN's UpdateSubscribeInfo takes the new fd.
    c = mock.load_model(OPS, device=0)
    with aclprof.subscribe(c, device=0):
        with aclprof.subscribe(a, device=0) as again:
            mock.execute(a, 2)
    assert again.stats.records_read == 2 * len(OPS)
    # The library replaced the old entry's pointer: it will never write -1 into the old cell.
    assert a not in lifetime._deferred_by_model  # (c, closed last on dev0, is deferred)
    assert [record_key(x) for x in again] == [e.key() for e in emit_log.read(a)][len(OPS):]
    sub_b.close()
    assert lifetime._deferred_cells == [] and lifetime._deferred_by_model == {}
    # Once the last subscription ended, the model can be subscribed alone again.
    with aclprof.subscribe(a, device=0) as alone:
        mock.execute(a, 1)
    assert alone.stats.records_read == len(OPS)


def test_mock_reproduces_the_resubscribe_trap():
    """What the guard prevents, straight on the library: the new cell receives nothing,
    the old one gets the records, the unsubscribe fails with 100011."""
    from aclprof.binding import lowlevel

    a, b = two_models()
    pipes = [os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC) for _ in range(3)]
    cells = [lowlevel.FdCell(w) for _, w in pipes]
    configs = [lowlevel.create_subscribe_config(True, 0, cell) for cell in cells]
    try:
        lowlevel.model_subscribe(a, configs[0])
        lowlevel.model_subscribe(b, configs[1])
        lowlevel.model_unsubscribe(a)
        assert cells[0].value == pipes[0][1]  # deferred
        lowlevel.model_subscribe(a, configs[2])  # accepted...
        mock.execute(a, 1)
        mock.wait_writer_idle()
        assert len(os.read(pipes[0][0], 1 << 16)) == mock.stats()["bytesWritten"] > 0
        with pytest.raises(BlockingIOError):
            os.read(pipes[2][0], 1)  # ...but fed nothing
        with pytest.raises(aclprof.binding.errors.InvalidModelIdError):
            lowlevel.model_unsubscribe(a)
        lowlevel.model_unsubscribe(b)
        assert cells[1].value == pipes[1][1]  # b's close is now deferred for good
        assert mock.mode() == "SUBSCRIBE"
    finally:
        mock.reset()  # closes through the kept pointers
        assert cells[0].value == cells[1].value == -1
        # The configs were freed by the reset; their handles are simply dropped (no __del__).
        for r, _ in pipes:
            os.close(r)
        os.close(pipes[2][1])
