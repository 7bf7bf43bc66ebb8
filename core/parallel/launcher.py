"""Ranks that die with their launcher (Linux), light to import (no torch): the command line
uses it before any run starts.

``torchrun`` (or ``rlvr train --nproc-per-node N``) starts one process per rank. Killed with
``kill -9``, a launcher cannot stop its ranks, which would train on, orphaned, writing
checkpoints to the end. So each rank asks the kernel for ``SIGKILL`` when its parent dies
(``prctl(PR_SET_PDEATHSIG)``, through ctypes), and ``rlvr train --nproc-per-node`` becomes
torchrun (``exec``, same pid) rather than starting it as a child that would outlive it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

#: The pid of the process that started the ranks, when rlvr launched them
#: (``rlvr train --nproc-per-node N`` becomes torchrun, so its pid is the ranks' parent).
LAUNCHER_ENV = "RLVR_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when the thread that started it ends
    (``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``); elsewhere nothing."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tie_to_launcher() -> None:
    """A rank ends with its launcher. The kernel signals only a parent death that comes after
    the ``prctl``, so the parent is checked after it: still the one that was there before,
    the launcher rlvr recorded (:data:`LAUNCHER_ENV`) when rlvr started the ranks, and not
    init (an orphan's new parent). A launcher already gone stops the rank at once."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    die_with_parent()
    recorded = os.environ.get(LAUNCHER_ENV, "")
    now = os.getppid()
    if now != parent or now == 1 or (recorded.isdigit() and int(recorded) != now):
        print(
            f"rank {os.environ.get('RANK', '?')}: the launcher that started this rank has "
            "exited; stopping",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)


__all__ = ["LAUNCHER_ENV", "die_with_parent", "tie_to_launcher"]
