"""The event loop environment calls run on (:class:`EnvironmentLoop`): in a daemon thread of
its own, each call bounded by a timeout, and replaced when a call blocks it, so one hanging
environment call fails its episode and not the run. Each synchronous call made from it gets a
daemon thread of its own (:class:`DaemonThreads`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any

logger = logging.getLogger("rlvr.rollout.event_loop")

#: Seconds past its own timeout that a call may take before the event loop counts as blocked.
_GRACE = 1.0


class DaemonThreads(concurrent.futures.ThreadPoolExecutor):
    """An executor that runs each call in a daemon thread of its own (started per call, gone
    when it returns). The default executor of the environments' event loop: a call that
    hangs holds its own thread only, and a daemon thread never keeps the process alive
    (the interpreter joins a ``ThreadPoolExecutor``'s threads at exit)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="rlvr-env-call")

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # the caller's to see, as a pool thread would pass it
                future.set_exception(exc)
            else:
                future.set_result(result)

        name = f"rlvr-env-call-{getattr(fn, '__name__', 'call')}"
        threading.Thread(target=work, daemon=True, name=name).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to wait for: a call still running belongs to an abandoned episode."""


class EnvironmentLoop:
    """An event loop in a daemon thread that runs environment coroutines with timeouts.

    The trainer's thread submits a batch of calls and waits for them; a call past its timeout
    is cancelled (a failure of its episode). A loop blocked by a synchronous hang is abandoned
    (its daemon thread with it) and a new one started, so the next calls still run.
    """

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        self.loop = asyncio.new_event_loop()
        # asyncio.to_thread / run_in_executor(None, ...): a daemon thread per call
        self.loop.set_default_executor(DaemonThreads())
        self.died: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True, name="rlvr-env")
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.loop.run_forever()
        except BaseException as exc:  # SystemExit from a task ends the loop: a crash
            self.died = exc

    def run(
        self, calls: Sequence[tuple[Coroutine[Any, Any, Any], float]]
    ) -> list[tuple[Any, str | None, float]]:
        """Run ``(coroutine, timeout)`` pairs concurrently: ``(result, None, seconds)`` or
        ``(None, cause, seconds)`` for each, in order."""
        if not calls:
            return []
        # Each call reports its outcome itself, as it ends: a task's own future completes
        # through a callback queued behind the loop's other ready work, so a call that had
        # finished would look blocked when the next one blocks the loop.
        done: list[concurrent.futures.Future] = [concurrent.futures.Future() for _ in calls]
        futures = [
            asyncio.run_coroutine_threadsafe(_bounded(coro, timeout, report), self.loop)
            for (coro, timeout), report in zip(calls, done, strict=True)
        ]
        limit = max(timeout for _, timeout in calls) + _GRACE
        deadline = time.perf_counter() + limit
        pending: Any = [f for pair in zip(done, futures, strict=True) for f in pair]
        while (
            any(not (d.done() or f.done()) for d, f in zip(done, futures, strict=True))
            and self.thread.is_alive()
            and time.perf_counter() < deadline
        ):
            _, pending = concurrent.futures.wait(
                pending, timeout=0.05, return_when=concurrent.futures.FIRST_COMPLETED
            )
        out: list[tuple[Any, str | None, float]] = []
        blocked = False
        for report, future, (_, timeout) in zip(done, futures, calls, strict=True):
            if report.done():
                out.append(report.result())
                continue
            if not future.done():
                blocked = True
                future.cancel()
                if self.died is not None:
                    why = f"crashed the event loop ({type(self.died).__name__}: {self.died})"
                else:
                    why = f"blocked the event loop for over {timeout:g}s"
                out.append((None, why, limit))
                continue
            try:
                out.append(future.result())
            except BaseException as exc:  # the loop died under it (SystemExit in a task...)
                out.append((None, f"{type(exc).__name__}: {exc}", limit))
        if blocked or not self.thread.is_alive():
            logger.warning(
                "an environment call %s; starting a new event loop",
                "crashed its event loop"
                if self.died is not None
                else "blocked its event loop (a synchronous wait inside an async method? use "
                "asyncio.to_thread)",
            )
            if self.thread.is_alive():
                self.loop.call_soon_threadsafe(self.loop.stop)
            self._start()
        return out

    def close(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=1.0)


async def _bounded(
    coro: Coroutine[Any, Any, Any], timeout: float, report: concurrent.futures.Future | None = None
) -> tuple[Any, str | None, float]:
    """``(value, None, seconds)``, or ``(None, why, seconds)`` when the call raised or ran
    past ``timeout``; also set on ``report`` the moment the call ends."""
    t0 = time.perf_counter()
    try:
        # In this task, not a task of its own (as wait_for would): a SystemExit in a task of
        # its own would propagate out of the loop and end every episode's calls with it.
        async with asyncio.timeout(timeout):
            value = await coro
        outcome: tuple[Any, str | None, float] = (value, None, time.perf_counter() - t0)
    except TimeoutError:
        outcome = None, f"timed out after {timeout:g}s", time.perf_counter() - t0
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # SystemExit, KeyboardInterrupt raised by the environment
        outcome = None, f"raised {type(exc).__name__}: {exc}", time.perf_counter() - t0
    if report is not None and not report.done():
        report.set_result(outcome)
    return outcome


__all__ = ["DaemonThreads", "EnvironmentLoop"]
