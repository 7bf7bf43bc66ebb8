"""A run's hold on its ``training.output_dir``: an exclusive lock for the life of the run, and a
record of the names rlvr created there.

Lock: rank 0 takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``OUTPUT_DIR/.rlvr-run.json`` before
the run reads or writes anything there, and holds it until the run ends. A second run on the
directory finds it held and stops with one line naming the holder (pid, host, start time and
command, which the holder writes into the file). The kernel releases a flock when the process
holding it ends, however it ends (``kill -9`` included), so a lock cannot go stale: the file a
dead run left is simply taken over and rewritten. flock is reliable on a local filesystem;
NFSv4 maps it to byte-range locks; a few network or FUSE filesystems ignore it, and there two
runs are not kept apart.

Record: the same file lists the top-level names that runs in the directory created
(:data:`RUN_NAMES`). rlvr never writes over a file it did not create: a run stops before the
model loads when a name it writes exists there and is not in the record (a user's own
``config.yaml`` with ``output_dir: .``), or when a ``checkpoint-<step>`` directory there has
no ``COMPLETE`` marker (another trainer's checkpoint). Files of other names are left alone,
so ``output_dir`` may be a directory that holds other things. The record also tells what a
run that died before its first checkpoint left (removed when the run starts over) from files
that are not rlvr's.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from rlvr.api.errors import RlvrError
from rlvr.outputs.metrics import METRICS_FILE, SAMPLES_FILE
from rlvr.rewards.failures import ERRORS_FILE

try:
    import fcntl
except ImportError:  # not on Windows: runs there are not kept apart
    fcntl = None  # type: ignore[assignment]

RECORD = ".rlvr-run.json"
CONFIG_FILE = "config.yaml"
#: The top-level names a training run writes besides its checkpoints (``tensorboard`` and
#: ``wandb`` with ``training.report_to``).
RUN_NAMES = (CONFIG_FILE, METRICS_FILE, SAMPLES_FILE, ERRORS_FILE, "tensorboard", "wandb")
#: The marker a checkpoint directory gets last (:mod:`rlvr.outputs.checkpoint`): without it,
#: a ``checkpoint-<step>`` directory is no complete rlvr checkpoint.
COMPLETE = "COMPLETE"

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints in ``output_dir``, oldest step first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := _CHECKPOINT.match(p.name)) and p.is_dir() and (p / COMPLETE).is_file()
    ]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The complete checkpoint with the highest step, or None; incomplete ones are ignored."""
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


class OutputDirError(RlvrError):
    """The output directory is another run's, or holds files rlvr did not create."""


class Hold:
    """Rank 0's lock on ``root`` and the record of what rlvr created there (:func:`hold`)."""

    def __init__(
        self, root: Path, fd: int, created: list[str], *, made: tuple[bool, bool] = (False, False)
    ) -> None:
        self.root = root
        self._fd: int | None = fd
        self.created = set(created)
        #: whether this hold made the directory, and the record in it (undone by abandon())
        self._made_dir, self._made_record = made
        self.holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
        }
        self._write()

    def _write(self) -> None:
        assert self._fd is not None
        data = json.dumps({**self.holder, "created": sorted(self.created)}, indent=1).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def left_behind(self) -> list[str]:
        """The files an earlier run here created that are still there."""
        return [n for n in RUN_NAMES if n in self.created and (self.root / n).exists()]

    def adopt(self) -> None:
        """Take the run files of a directory written before the record existed as rlvr's."""
        self.created = _adopted(self.root, self.created)
        self._write()

    def remove(self, names: list[str]) -> None:
        for name in names:
            path = self.root / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def claim(self) -> None:
        """Record every name the run writes as rlvr's (none of them is anyone else's now)."""
        self.created |= set(RUN_NAMES)
        self._write()

    def close(self) -> None:
        """Release the lock (the file stays: it keeps the record)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None

    def abandon(self) -> None:
        """Release the lock of a run that was refused the directory, and take back what
        :func:`hold` made there (the record, the directory if it is empty): a refused run
        leaves the directory as it found it."""
        if self._made_record:
            (self.root / RECORD).unlink(missing_ok=True)  # still locked: no one else wrote it
        self.close()
        if self._made_dir:
            with contextlib.suppress(OSError):  # not empty: someone else's files now
                self.root.rmdir()


def hold(output_dir: str | Path) -> Hold:
    """Create ``output_dir`` if needed and lock it for this process; raises
    :class:`OutputDirError` when another live run holds it or it is not a directory."""
    root = Path(output_dir).absolute()
    made = (not root.exists(), not (root / RECORD).exists())
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / RECORD, os.O_RDWR | os.O_CREAT, 0o644)
    except (FileExistsError, NotADirectoryError):
        raise OutputDirError(not_a_directory(root)) from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OutputDirError(_in_use(root)) from None
    try:
        created = _read(root / RECORD).get("created") or []
        return Hold(root, fd, [str(n) for n in created], made=made)
    except BaseException:
        os.close(fd)
        raise


def refusal(output_dir: str | Path, *, resume: bool, created: set[str] | None = None) -> str | None:
    """Why ``rlvr train`` (``resume``: with ``--resume``) may not use ``output_dir``, or None:
    a run there and no ``--resume``, ``--resume`` and nothing to resume, or a file it would
    write that rlvr did not create. ``created``: the record's names (default: read from the
    record). Read-only and light (no torch), so ``rlvr validate`` and ``rlvr train`` say it
    before anything loads; the run asks again under the directory's lock
    (:func:`rlvr.outputs.resume.resume_point`)."""
    root = Path(output_dir).absolute()
    if not root.is_dir():
        return None  # a new directory; a file in the way is preflight's problem
    if created is None:
        created = {str(n) for n in _read(root / RECORD).get("created") or []}
    found = latest_checkpoint(root)
    if found is not None:
        created = _adopted(root, created)  # a run of an rlvr from before the record
    foreign = _foreign(root, created)
    if foreign:
        return (
            f"training.output_dir {root} holds {', '.join(foreign)}, which rlvr did not "
            f"create (its record, {RECORD}, does not list it); rlvr writes files of those "
            "names and never overwrites one it did not create: set training.output_dir to "
            "another directory, or move them away"
        )
    if found is not None and not resume:
        return (
            f"{root} already holds a run ({found.name}); pass --resume to continue it, or set "
            "training.output_dir to a new directory (rlvr never overwrites a run)"
        )
    started = any(n in created and (root / n).exists() for n in RUN_NAMES)
    if found is None and resume and not started:
        return (
            f"--resume: no complete checkpoint in {root}, and no run started there (looked "
            "for checkpoint-<step> directories with a COMPLETE marker); run without --resume "
            "to start one"
        )
    return None


def _adopted(root: Path, created: set[str]) -> set[str]:
    """``created`` of a directory with a checkpoint: an empty record (a run from before the
    record existed) takes the run files there as rlvr's."""
    if created:
        return created
    return {n for n in RUN_NAMES if (root / n).exists()}


def _foreign(root: Path, created: set[str]) -> list[str]:
    """Names a run would write that exist in ``root`` and are not rlvr's."""
    names = [n for n in RUN_NAMES if (root / n).exists() and n not in created]
    names += [
        f"{p.name} (no {COMPLETE} marker: not an rlvr checkpoint)"
        for p in sorted(root.iterdir())
        if _CHECKPOINT.match(p.name) and p.is_dir() and not (p / COMPLETE).exists()
    ]
    return names


def not_a_directory(root: Path) -> str:
    """The problem of an ``output_dir`` that is a file (or lies under one)."""
    file = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), root)
    where = "is a file" if file == root else f"lies under {file}, which is a file"
    return f"training.output_dir {root} {where}; set it to a directory (new or existing)"


def _read(path: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
        if isinstance(data, dict):
            return data
    return {}


def _in_use(root: Path) -> str:
    holder = _read(root / RECORD)
    who = "whose record is being written"
    if holder.get("pid"):
        who = (
            f"pid {holder['pid']} on {holder.get('host', '?')}, started "
            f"{holder.get('started', '?')}, `{holder.get('command', '?')}`"
        )
    return (
        f"training.output_dir {root} is in use by another run ({who}); wait for it to end or "
        "stop it, or set training.output_dir to another directory (the lock ends with the "
        "process that holds it, however it ends)"
    )


__all__ = [
    "COMPLETE",
    "CONFIG_FILE",
    "RECORD",
    "RUN_NAMES",
    "Hold",
    "OutputDirError",
    "hold",
    "latest_checkpoint",
    "list_checkpoints",
    "refusal",
]
