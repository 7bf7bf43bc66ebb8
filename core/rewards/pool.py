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
sample only. What it logs (:class:`rlvr.plugin.BatchOutput`) comes back with its values. A spec
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
:func:`shield_from_stop_signals`), are daemonic and, on Linux, are SIGKILLed when the parent
process dies, even in the middle of a call.

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

import atexit
import contextlib
import ctypes
import io
import json
import math
import multiprocessing as mp
import numbers
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import types
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.api.errors import RlvrError
from rlvr.api.runtime import (  # pydantic-free: the pytest plugin imports this
    REWARD_LIMIT,
    BatchOutput,
)

if TYPE_CHECKING:
    from rlvr.api.registration import BatchRewardFn, RewardFn, Sample

MAX_MESSAGES = 5  # distinct error messages kept per reward
#: With a ``max_error_frac``: a reward whose first this many calls of a :meth:`RewardPool.score`
#: (at least twice the workers) all time out is taken for stuck (an unreachable judge server),
#: and the call stops there instead of spending ``timeout x calls / workers`` on it.
STUCK_AFTER = 4
MAX_TRACEBACK = 4000  # characters of a traceback sent to the parent
#: Seconds a scoring round may go on after a stop was requested before its calls still running
#: are abandoned (:class:`ScoringAbandoned`): enough for a healthy round to end on real rewards.
STOP_GRACE = 5.0


class RewardWorkerError(RlvrError, RuntimeError):
    """Reward worker processes cannot start (the message says why, when a worker told)."""


class ScoringAbandoned(RlvrError, RuntimeError):
    """A stop was requested and the scoring round was still running :data:`STOP_GRACE`
    seconds later: its calls were abandoned, so the round has no result (the trainer discards
    the step)."""


@dataclass(frozen=True)
class PoolSpec:
    """One reward to run: ``factory(params)`` builds it in each worker.

    ``factory`` must be importable by reference (a module-level function or class) and
    ``params`` picklable. ``timeout`` is in seconds per call (a batched reward's call on a
    whole batch included).
    ``fallback`` is the value of a call that times out, raises, crashes or returns something
    invalid. ``batch``: the reward is batched (:class:`rlvr.plugin.BatchRewardFn`), called once per
    batch: ``"call"`` (every sample of a :meth:`RewardPool.score` call) or ``"group"`` (the
    samples sharing a ``Sample.group``); None: once per sample. ``in_process``: it runs in
    the calling process (built there, not in the workers; no timeout). ``scope``: the view of
    a multi-turn episode it gets, ``"answer"`` (the ``samples`` of :meth:`RewardPool.score`)
    or ``"transcript"`` (its ``transcripts``).
    """

    label: str
    factory: Callable[[Any], RewardFn | BatchRewardFn]
    params: Any = None
    timeout: float = 10.0
    fallback: float | None = 0.0
    batch: str | None = None
    in_process: bool = False
    scope: str = "answer"


@dataclass
class PoolResult:
    """The values of one :meth:`RewardPool.score` call, by reward label, in sample order."""

    values: dict[str, list[float | None]]
    timeouts: dict[str, int]
    errors: dict[str, int]
    error_messages: dict[str, list[str]] = field(default_factory=dict)
    #: per label: sample index -> why that call failed (errors and timeouts)
    failures: dict[str, dict[int, str]] = field(default_factory=dict)
    #: per label: sample index -> where its exception was raised (calls that raised)
    sites: dict[str, dict[int, str]] = field(default_factory=dict)
    #: per label: site -> the traceback of its first occurrence in a process
    tracebacks: dict[str, dict[str, str]] = field(default_factory=dict)
    #: why the call stopped before scoring every sample (``max_error_frac``); the values of
    #: the calls it did not make are None. None when every call was made.
    stopped: str | None = None
    #: per label: what batched rewards logged (:class:`rlvr.plugin.BatchOutput`): column -> one
    #: value per sample (None where not logged), and metric name -> the values logged
    columns: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    metrics: dict[str, dict[str, list[float]]] = field(default_factory=dict)


# --------------------------------------------------------------------------- both sides


def _build(label: str, factory: Callable, params: Any) -> Callable | str:
    """The reward, or the message every call of it reports when building it failed."""
    try:
        return factory(params)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a factory is a failure too
        return f"building reward {label!r} failed: {type(exc).__name__}: {exc}"


def _raised(
    exc: BaseException, label: str, seen: set[tuple[str, str]]
) -> tuple[str, str, str | None]:
    """``(error message, site, traceback)`` of an exception a reward raised.

    ``site`` names where it was raised (type, file, line): the same bug with different
    messages is one site. The traceback comes only the first time this process sees that
    site for that label (``seen``), to keep the pipes lean."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    site = f"{type(exc).__name__} at {where}"
    tb = None
    if (label, site) not in seen:
        seen.add((label, site))
        # without the frame of the function that made the call
        below = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        lines = traceback.format_exception(type(exc), exc, below)
        tb = _clip("".join(lines), MAX_TRACEBACK)
    return _clip(f"{type(exc).__name__}: {exc}", 300), site, tb


def _checked(label: str, value: Any) -> tuple[float | None, str | None]:
    """``(value as a float or None, None)``, or ``(None, why the value is not a score)``."""
    if value is None:
        return None, None
    if isinstance(value, numbers.Real) and math.isfinite(value):
        if abs(float(value)) <= REWARD_LIMIT:
            return float(value), None
        # Finite, but no score: its square overflows the advantages' statistics (1e308).
        return None, (
            f"reward {label!r} returned {_clip(repr(value), 80)}, beyond the "
            f"{REWARD_LIMIT:g} a reward value may reach in magnitude; expected a score of "
            "about -1..1"
        )
    return None, (
        f"reward {label!r} returned {_clip(repr(value), 80)} ({type(value).__name__}); "
        "expected a finite float, a bool or None"
    )


def _call(
    fn: Callable | str, label: str, sample: Sample, seen: set[tuple[str, str]]
) -> tuple[float | None, str | None, str | None, str | None]:
    """``(value, None, None, None)``, or ``(None, error message, site, traceback)`` (see
    :func:`_raised`)."""
    if isinstance(fn, str):
        return None, fn, None, None
    try:
        value = fn(sample)
    except BaseException as exc:  # noqa: BLE001 - report, keep the worker alive
        return None, *_raised(exc, label, seen)
    return (*_checked(label, value), None, None)


#: What a batch call yields: ``(per-sample (value, error) or None, error of the whole call,
#: site, traceback, what it logged or None)``.
BatchReply = tuple[
    list[tuple[float | None, str | None]] | None,
    str | None,
    str | None,
    str | None,
    dict[str, Any] | None,
]


def _call_batch(
    fn: Callable | str, label: str, samples: list[Sample], seen: set[tuple[str, str]]
) -> BatchReply:
    """One call of a batched reward: each sample's ``(value, error)``, or the error that
    fails the whole batch (a raise, a return that is not one value per sample)."""
    if isinstance(fn, str):
        return None, fn, None, None, None
    try:
        out = fn(samples)
    except BaseException as exc:  # noqa: BLE001 - report, keep the worker alive
        return None, *_raised(exc, label, seen), None
    logs = None
    if isinstance(out, BatchOutput):
        logs = {"columns": dict(out.columns), "metrics": dict(out.metrics)}
        out = out.values
    try:
        values = None if isinstance(out, str | bytes | dict) else list(out)
    except TypeError:
        values = None
    if values is None or len(values) != len(samples):
        got = f"{len(values)} values" if values is not None else _clip(repr(out), 80)
        return (
            None,
            f"reward {label!r} returned {got} for a batch of {len(samples)} samples; a "
            "batched reward returns one value (a float or None) per sample, in order",
            None,
            None,
            None,
        )
    return [_checked(label, v) for v in values], None, None, None, logs


def _clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 3] + "..."


# --------------------------------------------------------------------------- worker side


def _let_pass(signum: int, frame: Any) -> None:
    """The workers' SIGINT and SIGTERM handler: nothing to do, the parent handles them."""


def shield_from_stop_signals() -> None:
    """Let SIGINT and SIGTERM pass this process (a worker, or the forkserver forking them).

    A handler that does nothing rather than ``SIG_IGN``: an ignored signal stays ignored in
    every program a reward starts (``SIG_IGN`` survives ``exec``), so a code-execution sandbox
    could no longer be stopped with ``terminate()``; a handler is reset by ``exec``. Such a
    subprocess does get a signal sent to the whole process group, its reward call fails, and
    the trainer discards that step (:mod:`rlvr.training.trainer`)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _let_pass)


def _die_with_parent() -> None:
    """Linux: be SIGKILLed when our parent ends, even while a call holds the GIL.

    Under forkserver the parent is the forkserver, which exits when the pool's process ends,
    but only once no process holds its "alive" pipe: every forkserver child inherits that
    pipe (to start processes of its own), so a stuck worker would keep the forkserver alive
    and itself with it. Close the worker's copy (it would start its own forkserver if needed).
    """
    server: Any = forkserver._forkserver  # CPython internals, not in the stubs
    if getattr(server, "_forkserver_alive_fd", None) is not None and server._forkserver_pid is None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    with contextlib.suppress(AttributeError, OSError):  # not Linux
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _worker_main(
    conn, sys_path: list[str], payloads: list, broken: dict[int, str], die_with_parent: bool
) -> None:
    """Build the rewards, then run chunks of ``(task, reward index, sample or list of
    samples)`` until ``None``. A payload of None is a reward this worker does not run.

    Messages to the parent: ``("build", i)`` before building reward ``i``, ``("ready",)``,
    then per task, in order, ``(task, *`` what :func:`_call` or :func:`_call_batch`
    returned ``)``.
    """
    shield_from_stop_signals()
    if die_with_parent:
        _die_with_parent()
    sys.path[:] = sys_path
    labels = [label for label, _ in payloads]
    rewards: list[Callable | str] = []
    for i, (label, blob) in enumerate(payloads):
        if i in broken or blob is None:
            rewards.append(broken.get(i, f"reward {label!r} runs in the parent process"))
            continue
        conn.send(("build", i))
        try:
            factory, params = pickle.loads(blob)
        except BaseException as exc:  # noqa: BLE001 - e.g. the factory's module is missing
            rewards.append(f"loading reward {label!r} failed: {type(exc).__name__}: {exc}")
            continue
        rewards.append(_build(label, factory, params))
    conn.send(("ready",))
    seen: set[tuple[str, str]] = set()
    while True:
        try:
            chunk = conn.recv()
        except EOFError:  # the parent is gone
            return
        if chunk is None:
            return
        for task, i, arg in chunk:
            if isinstance(arg, list):
                conn.send((task, *_call_batch(rewards[i], labels[i], arg, seen)))
            else:
                conn.send((task, *_call(rewards[i], labels[i], arg, seen)))


# --------------------------------------------------------------------------- the forkserver

#: Set for the forkserver's start only (:func:`_start_forkserver`), read by
#: :mod:`rlvr.rewards._forkserver` there: the directory where a child that dies before it runs
#: writes its error (a file named by its pid), and that PYTHONSAFEPATH is rlvr's to remove.
ERRORS_DIR_ENV = "RLVR_WORKER_ERRORS"
SAFE_PATH_ENV = "RLVR_FORKSERVER_SAFE_PATH"
_forkserver_lock = threading.Lock()
_errors_dir: str | None = None


def _start_forkserver() -> None:
    """Start multiprocessing's forkserver, unless it runs: without the current directory on
    its ``sys.path`` (``PYTHONSAFEPATH``; it runs as ``python -c``, and Python 3.11 does not
    give it the parent's ``sys.path``), and knowing where its children report a failed start.

    Both go through the environment the forkserver starts with, the only way into it; they
    are in this process's ``os.environ`` only for that instant, and the forkserver takes
    PYTHONSAFEPATH out of its own at once, so rewards' subprocesses never see it."""
    global _errors_dir
    with _forkserver_lock:
        if _errors_dir is None:
            _errors_dir = tempfile.mkdtemp(prefix="rlvr-workers-")
            atexit.register(shutil.rmtree, _errors_dir, True)
        added = {ERRORS_DIR_ENV: _errors_dir}
        if not os.environ.get("PYTHONSAFEPATH"):
            added.update({"PYTHONSAFEPATH": "1", SAFE_PATH_ENV: "1"})
        before = {k: os.environ.get(k) for k in added}
        os.environ.update(added)
        try:
            forkserver.ensure_running()
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def report_start_errors(directory: str) -> None:
    """In the forkserver (:mod:`rlvr.rewards._forkserver`): a child that dies before it runs
    (importing the main script or rlvr, unpickling the worker) leaves its exception and the
    files of its traceback in ``directory/<pid>``, besides printing it as usual."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        with contextlib.suppress(Exception):
            frames = traceback.extract_tb(tb)
            where = [f"{f.filename}:{f.lineno}" for f in frames if not f.filename.startswith("<")]
            record = {"error": _clip(f"{kind.__name__}: {exc}", 500), "frames": where}
            Path(directory, str(os.getpid())).write_text(json.dumps(record), encoding="utf-8")
        previous(kind, exc, tb)

    sys.excepthook = hook


def _start_error(proc: Any, since: float) -> str | None:
    """What worker ``proc`` reported when it died before running (see
    :func:`report_start_errors`), as the end of a sentence; None when it reported nothing."""
    if _errors_dir is None or proc.pid is None:
        return None
    path = Path(_errors_dir, str(proc.pid))
    try:
        fresh = path.stat().st_mtime >= since - 1  # not an earlier process's with this pid
        record = json.loads(path.read_text(encoding="utf-8")) if fresh else None
    except (OSError, ValueError):
        return None
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    if record is None:
        return None
    frames: list[str] = record.get("frames") or []
    text = str(record.get("error"))
    if frames:
        text += f" (at {frames[-1]})"
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main is not None and any(f.rsplit(":", 1)[0] == os.path.abspath(main) for f in frames):
        text += (
            f"; every worker imports the main script {os.path.abspath(main)}: keep what it runs "
            'under `if __name__ == "__main__":`'
        )
    return text


# --------------------------------------------------------------------------- parent side


class _Pickler(pickle.Pickler):
    """``pickle.dumps``, noting whether anything pickled refers to the parent's ``__main__``
    (a function or class defined there, which a worker can only find by importing it)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self.main = False

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type | types.FunctionType) and obj.__module__ == "__main__":
            self.main = True
        return NotImplemented


def _dumps(obj: Any) -> tuple[bytes, bool]:
    """``(pickle of obj, whether it refers to __main__)``."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer)
    pickler.dump(obj)
    return buffer.getvalue(), pickler.main


_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def _main_left_out() -> Iterator[None]:
    """Processes started in this block do not import the parent's ``__main__``.

    multiprocessing runs the parent's main script (or ``-m`` module) again in every child it
    starts with spawn or forkserver, deciding from ``__main__.__file__`` and ``__spec__``: a
    script without the ``if __name__ == "__main__":`` guard would start its whole run again
    in each worker. Hidden while the child's start data are taken, and put back at once.
    """
    main = sys.modules["__main__"]
    with _MAIN_LOCK:
        saved: dict[str, Any] = {
            k: vars(main)[k] for k in ("__file__", "__spec__") if k in vars(main)
        }
        if "__file__" in saved:
            del main.__file__
        main.__spec__ = None  # read without a default
        try:
            yield
        finally:
            vars(main).update(saved)


class _Worker:
    """The parent's view of one worker process."""

    def __init__(self, ctx, args: tuple, started: list, main: bool) -> None:
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child_conn, *args), daemon=True, name="rlvr-reward"
        )
        started.append(self.proc)  # first: close() finds it even if start() is interrupted
        with contextlib.nullcontext() if main else _main_left_out():
            self.proc.start()
        child_conn.close()
        self.ready = False
        self.building: int | None = None  # index of the reward being built
        self.pending: deque[int] = deque()  # tasks sent and not finished, in order
        self.since = time.monotonic()  # when the current step (start, build, call) began
        self.started = time.time()  # wall clock, to match a start error file's mtime

    def current(self) -> tuple:
        if not self.ready:
            return ("build", self.building)
        return ("call", self.pending[0] if self.pending else None)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def _batches(samples: Sequence[Sample], mode: str) -> list[list[int]]:
    """The sample indices of each batch: all of them (``"call"``) or one batch per
    ``Sample.group`` in order of first appearance (``"group"``; a sample without a group is
    a batch of its own)."""
    if not samples:
        return []
    if mode == "call":
        return [list(range(len(samples)))]
    groups: dict[Any, list[int]] = {}
    for j, sample in enumerate(samples):
        key = ("group", sample.group) if sample.group is not None else ("alone", j)
        groups.setdefault(key, []).append(j)
    return list(groups.values())


class _Job:
    """One :meth:`RewardPool.score` call. Task ``t`` is ``tasks[t] = (reward index, sample
    index)``, or ``(reward index, [sample indices])`` for a batched reward's batch (those
    first: they are the long ones). ``local`` are the tasks the parent runs itself."""

    def __init__(
        self,
        specs: Sequence[PoolSpec],
        samples: Sequence[Sample],
        max_error_frac: float | None = None,
        stuck_after: int = STUCK_AFTER,
        *,
        by_group: bool = False,
        local: Callable[[int], bool] = lambda i: False,
        transcripts: Sequence[Sample] | None = None,
    ) -> None:
        self.specs = specs
        self.samples = samples
        if transcripts is not None and len(transcripts) != len(samples):
            raise ValueError(f"{len(transcripts)} transcripts for {len(samples)} samples")
        #: what each reward sees, by reward index: its scope's samples
        self.views = [
            transcripts if transcripts is not None and spec.scope == "transcript" else samples
            for spec in specs
        ]
        self.tasks: list[tuple[int, Any]] = []
        for i, spec in enumerate(specs):
            if spec.batch is not None:
                mode = "group" if by_group else spec.batch
                self.tasks.extend((i, batch) for batch in _batches(samples, mode))
        single = [i for i, spec in enumerate(specs) if spec.batch is None]
        self.tasks.extend((i, j) for j in range(len(samples)) for i in single)
        self.remaining = len(self.tasks)
        self.local = [t for t, (i, _) in enumerate(self.tasks) if local(i)]
        self.queue: deque[int] = deque(t for t, (i, _) in enumerate(self.tasks) if not local(i))
        labels = [s.label for s in specs]
        #: failures (errors and timeouts) a reward may have before the job stops (None: all)
        self.max_failures = (
            max_error_frac * len(samples)
            if max_error_frac is not None and max_error_frac < 1
            else None
        )
        self.stuck_after = stuck_after
        self.answered = dict.fromkeys(labels, 0)  # calls that returned (a value or an error)
        self.timed_out = dict.fromkeys(labels, 0)  # calls that timed out
        self.result = PoolResult(
            values={label: [None] * len(samples) for label in labels},
            timeouts=dict.fromkeys(labels, 0),
            errors=dict.fromkeys(labels, 0),
            error_messages={label: [] for label in labels},
            failures={label: {} for label in labels},
            sites={label: {} for label in labels},
            tracebacks={label: {} for label in labels},
            columns={label: {} for label in labels},
            metrics={label: {} for label in labels},
        )

    def task(self, t: int) -> tuple[int, int, Any]:
        """What a worker gets for task ``t``: ``(t, reward index, sample or [samples])``."""
        i, which = self.tasks[t]
        view = self.views[i]
        if isinstance(which, list):
            return t, i, [view[j] for j in which]
        return t, i, view[which]

    def spec(self, t: int) -> PoolSpec:
        return self.specs[self.tasks[t][0]]

    def timeout(self, t: int) -> float:
        """Task ``t``'s deadline: its reward's timeout (one call, a batch's too)."""
        return self.spec(t).timeout

    def record(self, t: int, *reply: Any) -> None:
        """Record what task ``t`` returned (:func:`_call`'s or :func:`_call_batch`'s reply)."""
        spec = self.spec(t)
        which = self.tasks[t][1]
        if not isinstance(which, list):
            self._settle(t, spec, which, *reply)
            return
        results, error, site, tb, logs = reply
        if results is None:
            self.fail(t, error or "no result", site=site, tb=tb)
            return
        self.remaining -= 1
        self.answered[spec.label] += 1
        for j, (value, why) in zip(which, results, strict=True):
            self._value(spec, j, value, why, None, None, False)
        if logs:
            columns = self.result.columns[spec.label]
            for name, values in logs.get("columns", {}).items():
                column = columns.setdefault(str(name), [None] * len(self.samples))
                for j, value in zip(which, values, strict=False):
                    column[j] = value
            metrics = self.result.metrics[spec.label]
            for name, values in logs.get("metrics", {}).items():
                metrics.setdefault(str(name), []).extend(float(v) for v in values)
        self._check(spec)

    def fail(
        self,
        t: int,
        error: str,
        *,
        site: str | None = None,
        tb: str | None = None,
        timeout: bool = False,
    ) -> None:
        """Task ``t`` failed as a whole (raised, crashed, timed out): each of its samples
        gets the fallback and counts one error (or timeout)."""
        spec = self.spec(t)
        which = self.tasks[t][1]
        if not isinstance(which, list):
            self._settle(t, spec, which, None, error, site, tb, timeout)
            return
        self.remaining -= 1
        if timeout:
            self.timed_out[spec.label] += 1
        else:
            self.answered[spec.label] += 1
        for j in which:
            self._value(spec, j, None, error, site, tb, timeout)
        self._check(spec)

    def _settle(
        self,
        t: int,
        spec: PoolSpec,
        j: int,
        value: float | None,
        error: str | None,
        site: str | None = None,
        tb: str | None = None,
        timeout: bool = False,
    ) -> None:
        self.remaining -= 1
        if timeout:
            self.timed_out[spec.label] += 1
        else:
            self.answered[spec.label] += 1
        self._value(spec, j, value, error, site, tb, timeout)
        if error is not None:
            self._check(spec)

    def _value(
        self,
        spec: PoolSpec,
        j: int,
        value: float | None,
        error: str | None,
        site: str | None,
        tb: str | None,
        timeout: bool,
    ) -> None:
        """Sample ``j``'s value of ``spec``: ``value``, or the fallback and a failure."""
        if error is None:
            self.result.values[spec.label][j] = value
            return
        self.result.values[spec.label][j] = spec.fallback
        self.result.failures[spec.label][j] = error
        if site is not None:
            self.result.sites[spec.label][j] = site
        if site is not None and tb is not None:
            self.result.tracebacks[spec.label].setdefault(site, tb)
        if timeout:
            self.result.timeouts[spec.label] += 1
        else:
            self.result.errors[spec.label] += 1
            messages = self.result.error_messages[spec.label]
            if len(messages) < MAX_MESSAGES and error not in messages:
                messages.append(error)

    def _check(self, spec: PoolSpec) -> None:
        """Stop the job (``result.stopped``) once ``spec``'s failures make the outcome
        certain: more than ``max_error_frac`` of the samples, or its first ``stuck_after``
        calls all timed out (the caller stops the run either way)."""
        if self.max_failures is None or self.result.stopped is not None:
            return
        label, n = spec.label, len(self.samples)
        failed = len(self.result.failures[label])
        timeouts = self.timed_out[label]
        if failed > self.max_failures:
            self.result.stopped = (
                f"reward {label!r} failed on {failed} of the {n} calls already, past the share "
                "allowed; the rest were not made"
            )
        elif self.answered[label] == 0 and timeouts >= self.stuck_after:
            left = n - failed
            self.result.stopped = (
                f"reward {label!r} timed out on each of its first {timeouts} calls "
                f"({spec.timeout:g} s each) and answered none: it looks stuck (e.g. a judge "
                f"server it cannot reach); the other {left} calls were not made"
            )

    @property
    def stopped(self) -> bool:
        return self.result.stopped is not None


def _death(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


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
        self._workers: list[_Worker] = []
        self._started: list = []  # every worker process not known to have ended
        self._all_local = workers == 0
        #: the rewards this process runs itself, by index
        self._local: dict[int, Callable | str] = {
            i: _build(s.label, s.factory, s.params)
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
            (None, False) if s.in_process else _dumps((s.factory, s.params)) for s in self.specs
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
            job = _Job(
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
                self._run(_Job(self.specs, []), chunk=1, until_ready=True)

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

    def _start(self) -> _Worker:
        # Under spawn the parent is the thread that starts the worker: only the main thread
        # lives as long as the process.
        die_with_parent = (
            self._ctx.get_start_method() == "forkserver"
            or threading.current_thread() is threading.main_thread()
        )
        args = (list(sys.path), self._payloads, dict(self._broken), die_with_parent)
        self._started = [p for p in self._started if p.is_alive()]
        if self._ctx.get_start_method() == "forkserver":
            _start_forkserver()  # its own way (see there), and again should it have died
        return _Worker(self._ctx, args, self._started, self._main)

    def _run_local(self, job: _Job) -> None:
        """Run the tasks of the rewards this process runs itself."""
        for t in job.local:
            if job.stopped:
                break
            _, i, arg = job.task(t)
            fn, label = self._local[i], self.specs[i].label
            if isinstance(arg, list):
                job.record(t, *_call_batch(fn, label, arg, self._seen))
            else:
                job.record(t, *_call(fn, label, arg, self._seen))

    def _run(self, job: _Job, chunk: int, until_ready: bool = False) -> None:
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

    def _abandon_if_stopping(self, job: _Job, since: float | None) -> float | None:
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

    def _dispatch(self, job: _Job, chunk: int) -> None:
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

    def _deadline(self, w: _Worker, job: _Job) -> float:
        if not w.ready:
            return w.since + self.build_timeout
        if w.pending:
            return w.since + job.timeout(w.pending[0])
        return math.inf

    def _wait(self, job: _Job) -> None:
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

    def _drain(self, w: _Worker, job: _Job) -> bool:
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

    def _replace(self, i: int, job: _Job, reason: str | None) -> None:
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
            what = f"crashed the worker process ({_death(w.proc)})"
        elif not w.ready:
            what = f"timed out after {self.build_timeout}s"
        elif w.pending:
            what = f"timed out after {job.timeout(w.pending[0]):g}s"
        if reason and not w.ready and w.building is not None:
            self._broken[w.building] = f"building reward {self.specs[w.building].label!r} {what}"
        elif reason and not w.ready:
            self._start_failures += 1
            if self._start_failures >= 3:
                cause = _start_error(w.proc, w.started) if reason == "crash" else None
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
    "report_start_errors",
    "shield_from_stop_signals",
]
