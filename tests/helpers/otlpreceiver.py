"""PyPI ``oteltap`` (an embeddable OTLP/HTTP receiver) on loopback, driven from synchronous
tests: its asyncio loop runs on a thread of its own for the whole module; :meth:`Tap.expect`
returns the metric data points received until as many as expected have arrived
(:meth:`Tap.expect_spans` the spans, at ``tap.traces_endpoint``); :func:`as_bins` reads a
point's buckets as our histogram's bins."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from aclprof.exportfmt.otlp import SCALE
from aclprof.protocol.quantshift import NBINS
from helpers.procs import free_port

__all__ = ["Tap", "as_bins"]


class Tap:
    """``with Tap() as tap:`` a receiver at ``tap.endpoint`` (``/v1/metrics``) and
    ``tap.traces_endpoint`` (``/v1/traces``)."""

    def __init__(self) -> None:
        from oteltap import OtelTapHttpProtobufReceiver, OtelTapHttpProtobufReceiverSettings

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/v1/metrics"
        self.traces_endpoint = f"http://127.0.0.1:{self.port}/v1/traces"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="oteltap", daemon=True)
        self._receiver = OtelTapHttpProtobufReceiver(OtelTapHttpProtobufReceiverSettings(http_port=self.port))
        self._metrics: asyncio.Queue[Any] | None = None
        self._spans: asyncio.Queue[Any] | None = None
        self._pumps: list[asyncio.Task[None]] = []

    def __enter__(self) -> Tap:
        self._thread.start()
        self._run(self._start())
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._run(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def _run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _start(self) -> None:
        await self._receiver.start()
        self._metrics, self._spans = asyncio.Queue(), asyncio.Queue()

        async def pump(stream: Any, queue: asyncio.Queue[Any]) -> None:
            async for m in stream:
                queue.put_nowait(m)

        self._pumps = [asyncio.create_task(pump(self._receiver.stream_metrics(), self._metrics)),
                       asyncio.create_task(pump(self._receiver.stream_traces(), self._spans))]
        await asyncio.sleep(0)  # the streams are subscribed before anything is pushed

    async def _stop(self) -> None:
        for pump in self._pumps:
            pump.cancel()
        await self._receiver.stop()

    def expect(self, points: int, push: Callable[[], None], timeout: float = 20.0) -> list[tuple[Any, Any]]:
        """Run ``push`` (on the calling thread) and return the (metric, data point) pairs
        received, once ``points`` exponential-histogram points have arrived."""
        async def take() -> list[tuple[Any, Any]]:
            assert self._metrics is not None
            out: list[tuple[Any, Any]] = []
            while len(out) < points:
                m = await self._metrics.get()
                out += [(m, p) for p in m.exponential_histogram.data_points]
            return out

        push()
        return self._run(asyncio.wait_for(take(), timeout), timeout + 5)


    def expect_spans(self, spans: int, push: Callable[[], None], timeout: float = 20.0,
                     quiet: float = 0.5) -> list[Any]:
        """Run ``push`` and return the spans (``opentelemetry.proto.trace.v1.Span``; the receiver
        hands out spans without their resource) received once ``spans`` have arrived and no
        other came for ``quiet`` seconds (so a test sees a span too many)."""
        async def take() -> list[Any]:
            assert self._spans is not None
            out = []
            while len(out) < spans:
                out.append(await self._spans.get())
            while True:
                try:
                    out.append(await asyncio.wait_for(self._spans.get(), quiet))
                except asyncio.TimeoutError:
                    return out

        push()
        return self._run(asyncio.wait_for(take(), timeout + quiet), timeout + quiet + 5)


def as_bins(point: Any) -> np.ndarray:
    """A received point's buckets in our bins: zero_count is bin 0, OTel bucket i at scale 3 is
    bin i + 1, and bucket -1 ((2**-1/8, 1] ns: a duration of 1 ns) is in our bin 1."""
    # a point of zeros only has no bucket, and the SDK sends it with scale 0 (meaningless there)
    assert point.scale == SCALE or not any(point.positive.bucket_counts), point.scale
    assert point.zero_threshold == 0 and not any(point.negative.bucket_counts)
    bins = np.zeros(NBINS, np.int64)
    bins[0] = point.zero_count
    for i, c in enumerate(point.positive.bucket_counts):
        if c:  # the SDK sends its whole bucket array, zeros included
            index = point.positive.offset + i
            assert -1 <= index < NBINS - 2, index  # within 1 ns .. 2**40 ns
            bins[max(index + 1, 1)] += c
    return bins
