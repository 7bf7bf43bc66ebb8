"""One reward worker process: what runs in it (``_worker_main``: build the rewards, then
answer chunks of calls), and the parent's handle that starts and stops it (:class:`Worker`).
How the pool uses them, and why each precaution, is in :mod:`rlvr.rewards.pool`.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import pickle
import signal
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing import forkserver
from typing import Any

from rlvr.rewards.pool_calls import build_reward, call_batch, call_reward


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
    then per task, in order, ``(task, *`` what :func:`~rlvr.rewards.pool_calls.call_reward`
    or :func:`~rlvr.rewards.pool_calls.call_batch` returned ``)``.
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
        rewards.append(build_reward(label, factory, params))
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
                conn.send((task, *call_batch(rewards[i], labels[i], arg, seen)))
            else:
                conn.send((task, *call_reward(rewards[i], labels[i], arg, seen)))


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


def dumps(obj: Any) -> tuple[bytes, bool]:
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


class Worker:
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


def death(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


__all__ = ["Worker", "death", "dumps", "shield_from_stop_signals"]
