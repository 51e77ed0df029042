"""The reader's failure paths (issue 13): a decoder that raises, a delivery that raises.

Nothing is lost uncounted: whatever the reader cannot deliver after a failure of the
binding itself is counted in ``dropped_decode_error``, which is part of
``SubscriptionStats.dropped``, so ``records_read == delivered + dropped + queued`` still
holds; the pipe keeps flowing to EOF (the library's flush at unsubscribe needs that), and
``close()`` is clean (no exception, no thread, no fd left).
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers.procs import aclprof_threads, wait_for
from helpers.records import record_key

import aclprof
from aclprof import mock
from aclprof.api.subscription import SubscriptionStats
from aclprof.api.subscription.decoder import Decoder
from aclprof.api.subscription.queue import BatchQueue

OPS = [
    {"name": "conv1", "type": "Conv2D", "duration_ns": 2000},
    {"name": "relu1", "type": "Relu", "duration_ns": 200},
    {"name": "fc", "type": "MatMulV2", "duration_ns": 3000},
]


class Boom(RuntimeError):
    """The injected failure (a bug in the binding)."""


def assert_balanced(st: SubscriptionStats) -> None:
    assert st.records_read == st.delivered + st.dropped + st.queued


def test_dropped_counts_decode_errors():
    """``dropped`` is the sum of every drop counter, decode errors included."""
    zero = SubscriptionStats(**{f.name: 0 for f in dataclasses.fields(SubscriptionStats)
                                if f.default is dataclasses.MISSING} | {"reader_lag_ns": None})
    assert zero.dropped == 0
    assert dataclasses.replace(zero, dropped_decode_error=7).dropped == 7
    assert dataclasses.replace(zero, dropped_decode_error=7, dropped_corrupt=1, dropped_queue_full=2,
                               dropped_callback_error=4).dropped == 14


def test_decoder_failure_on_one_chunk_counts_it_and_the_reader_goes_on(emit_log, monkeypatch):
    """The decoder raises on its 3rd chunk: those records, and only those, are dropped by
    decode error; the chunks before and after are delivered in order."""
    failed: list[int] = []
    real = Decoder._batch
    calls = 0

    def flaky(self, rows):
        # The last step of every chunk, whether read() decoded it in C or finish() did.
        nonlocal calls
        calls += 1
        batch = real(self, rows)  # names fetched (the library's entries freed), then a bug
        if calls == 3:
            failed.append(rows)
            raise Boom("injected decoder failure")
        return batch

    monkeypatch.setattr(Decoder, "_batch", flaky)
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, read_records=4)
    mock.execute(model, 20)
    sub.close()
    got = list(sub)

    emitted = emit_log.read(model)
    assert len(emitted) == 60 and len(failed) == 1 and 1 <= failed[0] <= 4
    st = sub.stats
    assert st.records_read == 60
    assert st.dropped_decode_error == failed[0]
    assert st.dropped == failed[0]  # nothing else dropped
    assert st.delivered == len(got) == 60 - failed[0]
    assert_balanced(st)
    # The lost records are one contiguous run: everything else arrives, in order.
    keys = [e.key() for e in emitted]
    got_keys = [record_key(r) for r in got]
    lost_at = next((i for i, (a, b) in enumerate(zip(got_keys, keys)) if a != b), len(got_keys))
    assert got_keys == keys[:lost_at] + keys[lost_at + failed[0]:]
    assert mock.stats()["nameTableEntries"] == 0
    assert aclprof_threads() == []


@pytest.mark.parametrize("fail_on", [1, 3])
def test_delivery_failure_discards_until_eof_and_counts_it(emit_log, monkeypatch, fail_on):
    """A failure outside the decoder (here: queueing the ``fail_on``-th batch) makes the
    reader give up decoding: it counts the batch in hand and everything it reads after it
    as dropped by decode error, and keeps draining the pipe until EOF."""
    real_put = BatchQueue.put
    puts: list[int] = []

    def failing_put(self, batch):
        puts.append(len(batch))
        if len(puts) == fail_on:
            raise Boom("injected delivery failure")
        real_put(self, batch)

    monkeypatch.setattr(BatchQueue, "put", failing_put)
    model = mock.load_model(OPS)
    sub = aclprof.subscribe(model, read_records=4)
    mock.execute(model, 10)
    wait_for(lambda: len(puts) >= fail_on, timeout=10, what="the failing put")
    # The reader is still draining: records emitted after the failure are read (and
    # discarded), so the library's writer never blocks on a full pipe.
    mock.execute(model, 10)
    mock.wait_writer_idle()
    wait_for(lambda: sub.stats.records_read == 60, timeout=10, what="all 60 records read")
    assert sub._thread.is_alive()  # it stops at EOF, not at the failure
    assert len(puts) == fail_on  # nothing was delivered after the failure

    sub.close()  # clean: no exception
    got = list(sub)
    st = sub.stats
    kept = sum(puts[:fail_on - 1])
    assert len(got) == st.delivered == kept
    assert st.queued == 0 and st.truncated_bytes == 0
    assert st.bytes_read == 60 * 80  # every byte read: the pipe was drained to EOF
    assert st.dropped_decode_error == 60 - kept
    assert st.dropped == 60 - kept
    assert_balanced(st)
    assert [record_key(r) for r in got] == [e.key() for e in emit_log.read(model)][:kept]
    assert sub.closed and aclprof_threads() == []
