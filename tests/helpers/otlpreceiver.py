"""PyPI ``oteltap`` (an embeddable OTLP/HTTP receiver) on loopback, driven from synchronous
tests: its asyncio loop runs on a thread of its own for the whole module; :meth:`Tap.expect`
returns the metric data points received until as many as expected have arrived."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from helpers.procs import free_port

__all__ = ["Tap"]


class Tap:
    """``with Tap() as tap:`` a receiver at ``tap.endpoint`` (``/v1/metrics``)."""

    def __init__(self) -> None:
        from oteltap import OtelTapHttpProtobufReceiver, OtelTapHttpProtobufReceiverSettings

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/v1/metrics"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="oteltap", daemon=True)
        self._receiver = OtelTapHttpProtobufReceiver(OtelTapHttpProtobufReceiverSettings(http_port=self.port))
        self._metrics: asyncio.Queue[Any] | None = None
        self._pump: asyncio.Task[None] | None = None

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
        self._metrics = asyncio.Queue()
        queue = self._metrics

        async def pump() -> None:
            async for m in self._receiver.stream_metrics():
                queue.put_nowait(m)

        self._pump = asyncio.create_task(pump())
        await asyncio.sleep(0)  # the stream is subscribed before anything is pushed

    async def _stop(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
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
