"""multiprocessing's forkserver as the reward workers need it: started without the current
directory on its ``sys.path``, and with a place where a child that dies before it runs leaves
its error, which the parent reads to say why "reward workers fail to start".
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import traceback
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

from rlvr.rewards.pool_calls import clip

#: Set for the forkserver's start only (:func:`start_forkserver`), read by
#: :mod:`rlvr.rewards._forkserver` there: the directory where a child that dies before it runs
#: writes its error (a file named by its pid), and that PYTHONSAFEPATH is rlvr's to remove.
ERRORS_DIR_ENV = "RLVR_WORKER_ERRORS"
SAFE_PATH_ENV = "RLVR_FORKSERVER_SAFE_PATH"
_forkserver_lock = threading.Lock()
_errors_dir: str | None = None


def start_forkserver() -> None:
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
            record = {"error": clip(f"{kind.__name__}: {exc}", 500), "frames": where}
            Path(directory, str(os.getpid())).write_text(json.dumps(record), encoding="utf-8")
        previous(kind, exc, tb)

    sys.excepthook = hook


def start_error(proc: Any, since: float) -> str | None:
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


__all__ = [
    "ERRORS_DIR_ENV",
    "SAFE_PATH_ENV",
    "report_start_errors",
    "start_error",
    "start_forkserver",
]
