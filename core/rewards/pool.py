"""Run reward calls in worker processes, with a deadline per call and crash isolation.

Rewards may hang (math-verify's ``verify`` on ``\\boxed{10^{10^{8}}}`` holds the GIL forever),
busy-loop, raise, or take the process down (segfault, ``os._exit``). :class:`RewardPool` keeps
the caller safe from all of these: every (reward, sample) call is one task; tasks travel to the
workers in chunks (so cheap rewards run at tens of thousands of calls per second) but each
result is reported as soon as it is ready, so the parent always knows which call a worker is
running and since when. A call that overruns its reward's ``timeout`` gets the worker
SIGKILLed; the call yields the fallback and counts as a timeout, a replacement worker starts
and the rest of the chunk is sent again. A crash is handled the same way (counted as an
error). A reward that raises, or returns something that is not a number (or a number that is
not finite, or past :data:`~rlvr.api.runtime.REWARD_LIMIT` in magnitude), yields the
fallback and counts as an error; the worker carries on.

A batched reward (``PoolSpec.batch``, TRL's convention: one call on a list of samples) is one
task per batch: its deadline is the reward's ``timeout``, whatever the batch's size (one
call, one timeout: a judge that never answers costs ``timeout``, not ``timeout`` per sample),
and a raise, crash, timeout or a return that is not one value per sample gives every sample
of the batch the fallback, each counted as an error (or timeout); an invalid value fails its
sample only. What it logs (:class:`rlvr.BatchOutput`) comes back with its values. A spec
marked ``in_process`` (a reward model on the trainer's GPU) never goes to the workers: the
calling process builds it and runs its tasks while the workers run the others.

A stop request (``RewardPool.stop_requested``, set by the trainer to its Ctrl-C/SIGTERM flag)
lets a scoring round finish for :data:`STOP_GRACE` seconds; calls still running then are
abandoned (their workers killed) and :meth:`RewardPool.score` raises :class:`ScoringAbandoned`,
so a run asked to stop while a reward hangs ends in seconds rather than after its timeouts.

Workers are started with ``forkserver`` (default) or ``spawn``, never ``fork`` (the parent may
hold torch threads). Each builds every reward once, ``factory(params)``, when it starts. They
get the parent's ``sys.path``, let SIGINT and SIGTERM pass (sent to a whole process group by
Ctrl-C, systemd or Slurm: the parent handles them, and stops its workers itself;
:func:`~rlvr.rewards.pool_worker.shield_from_stop_signals`), are daemonic and, on Linux, are
SIGKILLed when the parent process dies, even in the middle of a call.

The forkserver starts without the current directory on its ``sys.path`` (as ``python -P``):
it imports rlvr for every worker, and a directory named ``rlvr`` where the run is started (the
parent of a clone, or a package of one's own) would shadow the real one. A worker that dies
before it runs (its start imports the main script and rlvr) leaves its exception where the
parent finds it, so "reward workers fail to start" (:class:`RewardWorkerError`) names the cause.

Measured on a 2-core Linux VM shared with other jobs, Python 3.11: with
``forkserver`` the first pool of a process is ready, first call answered, in 0.3-0.6 s; later
pools, and the replacement of a killed worker, in 0.03-0.06 s (``spawn``: 0.5-1 s and 0.2-0.4 s).
Factories add their own time (importing math-verify: 0.5-1 s). A trivial reward runs at
15,000-55,000 calls/s through 2 workers (600,000/s in process); ``score`` of 64 samples takes
3-5 ms. Workers import the parent's ``__main__`` only when a reward's factory or params refer
to something defined there (multiprocessing would import it always): such a script needs the
``if __name__ == "__main__":`` guard, and a heavy ``__main__`` slows the start. Any other
script, guarded or not, and a notebook need nothing.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import TYPE_CHECKING

from rlvr.api.errors import RlvrError
from rlvr.rewards.pool_calls import build_reward, call_batch, call_reward
from rlvr.rewards.pool_forkserver import start_error, start_forkserver
from rlvr.rewards.pool_job import STUCK_AFTER, Job, PoolResult, PoolSpec
from rlvr.rewards.pool_worker import Worker, death, dumps

if TYPE_CHECKING:
    from rlvr.api.registration import Sample

#: Seconds a scoring round may go on after a stop was requested before its calls still running
#: are abandoned (:class:`ScoringAbandoned`): enough for a healthy round to end on real rewards.
STOP_GRACE = 5.0


class RewardWorkerError(RlvrError, RuntimeError):
    """Reward worker processes cannot start (the message says why, when a worker told)."""


class ScoringAbandoned(RlvrError, RuntimeError):
    """A stop was requested and the scoring round was still running :data:`STOP_GRACE`
    seconds later: its calls were abandoned, so the round has no result (the trainer discards
    the step)."""


class RewardPool:
    """Runs reward calls in ``workers`` processes; see the module docstring.

    ``workers=0`` runs every call in the calling process, serially: exceptions and invalid
    values are still caught, but there is no timeout and a crash takes the caller down (for
    debugging). A spec with ``in_process`` always runs so (built here, not in the workers;
    the parent runs its calls while the workers run the others). ``build_timeout`` bounds a
    worker's start plus its factories. :meth:`score` is thread-safe (calls are serialised).
    Use as a context manager, or call :meth:`close`.

    ``stop_requested``: None, or a function saying whether the run was asked to stop (the
    trainer's SIGINT/SIGTERM flag); once it says so, a round still running :data:`STOP_GRACE`
    seconds later is abandoned (:class:`ScoringAbandoned`).
    """

    def __init__(
        self,
        specs: Sequence[PoolSpec],
        *,
        workers: int = 2,
        start_method: str = "forkserver",
        build_timeout: float = 120.0,
        max_chunk: int = 64,
    ) -> None:
        labels = [s.label for s in specs]
        if len(set(labels)) != len(labels):
            raise ValueError(f"reward labels must be unique, got {labels}")
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if start_method == "fork":
            raise ValueError("start_method 'fork' is unsafe here; use 'forkserver' or 'spawn'")
        self.specs = list(specs)
        self.build_timeout = build_timeout
        self.max_chunk = max_chunk
        self._lock = threading.Lock()
        self._closed = False
        self.stop_requested: Callable[[], bool] | None = None
        self._workers: list[Worker] = []
        self._started: list = []  # every worker process not known to have ended
        self._all_local = workers == 0
        #: the rewards this process runs itself, by index
        self._local: dict[int, Callable | str] = {
            i: build_reward(s.label, s.factory, s.params)
            for i, s in enumerate(self.specs)
            if s.in_process or self._all_local
        }
        self._seen: set[tuple[str, str]] = set()  # errors run here whose traceback was sent
        if self._all_local:
            return
        self._ctx = mp.get_context(start_method)
        if start_method == "forkserver":  # import pydantic once, not in every new worker
            self._ctx.set_forkserver_preload(
                ["__main__", "rlvr.rewards._forkserver", "rlvr.api.registration"]
            )
        # Pickled here, so a lambda fails now, in the caller, with a clear message.
        pickled = [
            (None, False) if s.in_process else dumps((s.factory, s.params)) for s in self.specs
        ]
        self._payloads = [(s.label, blob) for s, (blob, _) in zip(self.specs, pickled, strict=True)]
        self._main = any(main for _, main in pickled)  # workers need the parent's __main__
        self._broken: dict[int, str] = {}  # rewards whose building killed or hung a worker
        self._start_failures = 0
        self._workers = [self._start() for _ in range(workers)]

    # ----------------------------------------------------------------------- public

    def score(
        self,
        samples: Sequence[Sample],
        *,
        max_error_frac: float | None = None,
        by_group: bool = False,
        transcripts: Sequence[Sample] | None = None,
    ) -> PoolResult:
        """Run every reward on every sample; never raises for a reward's misbehaviour.

        ``transcripts`` (as many as ``samples``): what the rewards whose ``scope`` is
        ``"transcript"`` get instead of ``samples`` (a multi-turn episode's whole
        conversation); None: every reward gets ``samples``.

        A batched reward is called once per batch (``PoolSpec.batch``); ``by_group`` makes
        every batch the samples of one ``Sample.group`` whatever the reward asks (``rlvr
        rewards score``: the rows sharing a prompt).

        With ``max_error_frac`` (below 1) the call stops as soon as a reward has failed on
        more than that share of the samples, or its first :data:`STUCK_AFTER` calls (at
        least twice the workers) all timed out: ``result.stopped`` then says why, and the
        calls not made are None. A caller that stops on such a share (the trainer) learns
        it without waiting ``timeout x calls / workers`` for a reward that hangs."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the reward pool is closed")
            stuck = max(STUCK_AFTER, 2 * len(self._workers))
            here = self._local.__contains__
            job = Job(
                self.specs,
                samples,
                max_error_frac,
                stuck,
                by_group=by_group,
                local=here,
                transcripts=transcripts,
            )
            if self._all_local:
                self._run_local(job)
                return job.result
            per_worker = math.ceil(len(job.queue) / (4 * len(self._workers)))
            self._run(job, chunk=max(1, min(self.max_chunk, per_worker)))
            return job.result

    def wait_ready(self) -> None:
        """Block until every worker has built its rewards (:meth:`score` does not need it)."""
        with self._lock:
            if not self._all_local and not self._closed:
                self._run(Job(self.specs, []), chunk=1, until_ready=True)

    def close(self) -> None:
        """Stop the workers: idle ones are asked to exit, the others killed (idempotent)."""
        with self._lock:
            self._closed = True
            idle = [w for w in self._workers if w.ready and not w.pending]
            for w in idle:
                with contextlib.suppress(OSError):
                    w.conn.send(None)
            for w in idle:
                w.proc.join(timeout=1.0)
            for proc in self._started:  # every worker, even one whose start() was interrupted
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            for w in self._workers:
                w.conn.close()
            self._workers, self._started = [], []

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------- internals

    def _start(self) -> Worker:
        # Under spawn the parent is the thread that starts the worker: only the main thread
        # lives as long as the process.
        die_with_parent = (
            self._ctx.get_start_method() == "forkserver"
            or threading.current_thread() is threading.main_thread()
        )
        args = (list(sys.path), self._payloads, dict(self._broken), die_with_parent)
        self._started = [p for p in self._started if p.is_alive()]
        if self._ctx.get_start_method() == "forkserver":
            start_forkserver()  # its own way (see there), and again should it have died
        return Worker(self._ctx, args, self._started, self._main)

    def _run_local(self, job: Job) -> None:
        """Run the tasks of the rewards this process runs itself."""
        for t in job.local:
            if job.stopped:
                break
            _, i, arg = job.task(t)
            fn, label = self._local[i], self.specs[i].label
            if isinstance(arg, list):
                job.record(t, *call_batch(fn, label, arg, self._seen))
            else:
                job.record(t, *call_reward(fn, label, arg, self._seen))

    def _run(self, job: Job, chunk: int, until_ready: bool = False) -> None:
        self._discard_stale()
        local = bool(job.local)
        stop_seen: float | None = None  # when a stop request was first seen
        try:
            while (job.remaining and not job.stopped) or (
                until_ready and not all(w.ready for w in self._workers)
            ):
                self._dispatch(job, chunk)
                if local:  # the workers run theirs meanwhile
                    local = False
                    self._run_local(job)
                    continue
                self._wait(job)
                stop_seen = self._abandon_if_stopping(job, stop_seen)
        except BaseException:  # e.g. Ctrl-C, or ScoringAbandoned
            self._discard_stale()
            raise
        if job.stopped:  # the calls still running are not wanted
            self._discard_stale()

    def _abandon_if_stopping(self, job: Job, since: float | None) -> float | None:
        """When a stop request was first seen (None: none was), or :class:`ScoringAbandoned`
        once the round has run :data:`STOP_GRACE` seconds past it."""
        if self.stop_requested is None or not self.stop_requested():
            return None
        now = time.monotonic()
        if since is None:
            return now
        if now - since < STOP_GRACE:
            return since
        calls = ", ".join(
            f"reward {job.spec(w.pending[0]).label!r} for {now - w.since:.1f} s"
            for w in self._workers
            if w.ready and w.pending
        )
        raise ScoringAbandoned(
            f"the rewards were still scoring {STOP_GRACE:g} s after the stop was requested "
            f"(running: {calls or 'workers starting'}); the round was abandoned"
        )

    def _discard_stale(self) -> None:
        """Replace the workers an interrupted call left busy (their results would be stale)."""
        for i, w in enumerate(self._workers):
            if w.pending or w.conn.closed:
                w.stop()
                self._workers[i] = self._start()

    def _dispatch(self, job: Job, chunk: int) -> None:
        """Send a chunk to each idle worker (only idle ones: a send must never block)."""
        for i, w in enumerate(self._workers):
            if not (w.ready and not w.pending and job.queue):
                continue
            batch = [job.queue.popleft() for _ in range(min(chunk, len(job.queue)))]
            w.pending.extend(batch)
            w.since = time.monotonic()
            try:
                w.conn.send([job.task(t) for t in batch])
            except OSError:  # it died while idle: blame nothing
                self._replace(i, job, None)

    def _deadline(self, w: Worker, job: Job) -> float:
        if not w.ready:
            return w.since + self.build_timeout
        if w.pending:
            return w.since + job.timeout(w.pending[0])
        return math.inf

    def _wait(self, job: Job) -> None:
        """Wait for messages, a death or the next deadline, and deal with what happened."""
        deadline = min(self._deadline(w, job) for w in self._workers)
        timeout = min(1.0, max(0.0, deadline - time.monotonic()))
        handles = [w.conn for w in self._workers] + [w.proc.sentinel for w in self._workers]
        ready = wait(handles, timeout)
        for i, w in enumerate(self._workers):
            alive = self._drain(w, job) and w.proc.sentinel not in ready
            if not alive:
                self._replace(i, job, "crash")
            elif self._deadline(w, job) <= time.monotonic():
                self._replace(i, job, "timeout")

    def _drain(self, w: Worker, job: Job) -> bool:
        """Handle every message waiting from ``w``; False once its pipe is closed."""
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "build":
                    w.building = msg[1]
                elif msg[0] == "ready":
                    w.ready, w.building = True, None
                    self._start_failures = 0
                else:
                    task = w.pending.popleft()
                    assert msg[0] == task, (msg, task)
                    job.record(*msg)
                w.since = time.monotonic()
        except (EOFError, OSError):
            return False
        return True

    def _replace(self, i: int, job: Job, reason: str | None) -> None:
        """Kill worker ``i``, blame what it was running (``reason``), re-queue the rest."""
        w = self._workers[i]
        current = w.current()
        w.proc.kill()
        w.proc.join()
        self._drain(w, job)  # results sent before it ended still count
        w.conn.close()
        self._workers[i] = self._start()
        if reason == "timeout" and w.current() != current:
            reason = None  # what overran finished just before the kill
        what = ""
        if reason == "crash":
            what = f"crashed the worker process ({death(w.proc)})"
        elif not w.ready:
            what = f"timed out after {self.build_timeout}s"
        elif w.pending:
            what = f"timed out after {job.timeout(w.pending[0]):g}s"
        if reason and not w.ready and w.building is not None:
            self._broken[w.building] = f"building reward {self.specs[w.building].label!r} {what}"
        elif reason and not w.ready:
            self._start_failures += 1
            if self._start_failures >= 3:
                cause = start_error(w.proc, w.started) if reason == "crash" else None
                why = f": {cause}" if cause else " (a worker's traceback may be above)"
                raise RewardWorkerError(
                    f"reward workers fail to start: 3 in a row died before building any "
                    f"reward; the last one {what}{why}"
                )
        elif reason and w.pending:
            t = w.pending.popleft()
            job.fail(t, f"reward {job.spec(t).label!r} {what}", timeout=reason == "timeout")
        job.queue.extendleft(reversed(w.pending))


__all__ = [
    "PoolResult",
    "PoolSpec",
    "RewardPool",
    "RewardWorkerError",
    "STOP_GRACE",
    "ScoringAbandoned",
]
