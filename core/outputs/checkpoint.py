"""Checkpoints: ``OUTPUT_DIR/checkpoint-<step>``, written atomically, the last K kept.

A checkpoint holds the policy and tokenizer (``save_pretrained``, so ``from_pretrained`` loads
it; with LoRA the adapter only, see :mod:`rlvr.model.lora`), every RNG state (python, numpy,
torch, CUDA), the trainer state (``trainer_state.json``: step, data position, ...) and one
``<name>.pt`` per piece kept as tensors (optimizer, scheduler, the value model when there is
one). Which pieces a run saves, and how they come back, is
:class:`rlvr.training.checkpointer.Checkpointer`'s; this module writes and reads the files.

Atomicity: everything is written into ``.checkpoint-<step>.tmp``, each file fsynced, then the
``manifest.json`` (every file's size and sha256), then a ``COMPLETE`` marker last, and the
directory is renamed to ``checkpoint-<step>``.
``rename`` is atomic, so a process killed at any moment leaves either no ``checkpoint-<step>``
or a complete one; :func:`latest_checkpoint` also requires the marker. Old checkpoints are
deleted by first renaming them to ``.checkpoint-<step>.del``, so a kill during the deletion
never leaves a half-deleted ``checkpoint-<step>`` either. Leftover dot-directories are removed
by the next save, and only rlvr's: each holds the marker file :data:`MARK`, written into the
temporary directory before anything else (and into a checkpoint before it is renamed away),
so a user's directory that happens to be named ``.checkpoint-7.tmp`` is never touched.

With several ranks (:mod:`rlvr.parallel.distributed`) rank 0 writes the checkpoint (the replicas'
weights and optimizer states are equal) and every other rank adds its RNG state
(``rng_state_rank<r>.pt``) to the temporary directory before rank 0 writes the marker. Under
FSDP the weights are gathered whole for ``save_pretrained``, but the optimizer state is not:
every rank writes its shards into ``optimizer/`` (``torch.distributed.checkpoint``) in place of
``optimizer.pt``, also before the marker.

Integrity: a file that changes after the marker (a bit flip, a truncated copy, a deleted
tokenizer) would load without complaint: a tokenizer without ``tokenizer.json`` loads as 2
tokens and the run goes on emitting empty completions. :func:`damage` checks every file
against the manifest before a resume trusts the checkpoint. Cost, measured on this project's
2-core CPU machine (hashlib's sha256 runs at 1.15 GiB/s there, SHA-NI): the tiny test
model's 1.5 MB checkpoint takes 8 ms to hash and write the manifest, 3 ms to verify; 540 MB
(a 135M model's float32 weights) 0.78 s, so a 135M model's whole checkpoint (1.62 GB with
AdamW's two moments) about 2.3 s at each save (read back from the page cache) and again at a
resume.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import pickle
import random
import re
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.api.errors import RlvrError
from rlvr.outputs.rundir import COMPLETE, latest_checkpoint, list_checkpoints
from rlvr.parallel import distributed
from rlvr.parallel.distributed import Dist

TRAINER_STATE = "trainer_state.json"
MANIFEST = "manifest.json"
#: The file that makes a directory rlvr's own (see the module docstring); not in the manifest.
MARK = ".rlvr-checkpoint"
#: The manifest's hash (hashlib's, which uses the CPU's SHA extensions where it has them).
HASH = "sha256"
_LEFTOVER = re.compile(r"^\.checkpoint-\d+\.(tmp|del|old)$")

#: Test hook: ``"STEP:SECONDS"`` sleeps inside the write of checkpoint STEP, after its files
#: and before its COMPLETE marker (so a test can SIGKILL the process mid-write).
SLEEP_ENV = "RLVR_TEST_CHECKPOINT_SLEEP"

logger = logging.getLogger("rlvr.outputs.checkpoint")


class CheckpointError(RlvrError, RuntimeError):
    """A checkpoint cannot be found or loaded."""


# --------------------------------------------------------------------------- RNG


def rng_state() -> dict[str, Any]:
    """Every RNG state the run depends on, in a form ``torch.load(weights_only=True)`` reads."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --------------------------------------------------------------------------- the best one


#: ``training.keep_best``'s record, in ``output_dir``: the step, metric and value of the best
#: in-training eval whose checkpoint is kept.
BEST_FILE = "best_checkpoint.json"


def best_checkpoint(output_dir: str | Path) -> dict[str, Any] | None:
    """The checkpoint ``training.keep_best`` kept: ``{"step", "metric", "value", "path"}``,
    or None (no record, or its checkpoint is not complete)."""
    root = Path(output_dir)
    try:
        record = json.loads((root / BEST_FILE).read_text(encoding="utf-8"))
        path = root / f"checkpoint-{int(record['step'])}"
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (path / COMPLETE).is_file():
        return None
    return {**record, "path": path}


def record_best(output_dir: str | Path, step: int, metric: str, value: float) -> None:
    """Record ``checkpoint-<step>`` as the best (written whole, then renamed into place)."""
    root = Path(output_dir)
    tmp = root / (BEST_FILE + ".tmp")
    tmp.write_text(
        json.dumps({"step": step, "metric": metric, "value": value}) + "\n", encoding="utf-8"
    )
    os.replace(tmp, root / BEST_FILE)


# --------------------------------------------------------------------------- writing


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _test_sleep(step: int) -> None:
    raw = os.environ.get(SLEEP_ENV)
    if not raw:
        return
    at, _, seconds = raw.partition(":")
    if int(at) == step:
        time.sleep(float(seconds or 3600))


def tmp_dir(output_dir: str | Path, step: int) -> Path:
    """Where checkpoint ``step`` is written before it is complete."""
    return Path(output_dir) / f".checkpoint-{step}.tmp"


def tensor_file(name: str) -> str:
    """The file of a checkpoint's piece ``name`` saved as tensors (``optimizer.pt``, ...)."""
    return f"{name}.pt"


def rank_rng_file(rank: int) -> str:
    return "rng_state.pt" if rank == 0 else f"rng_state_rank{rank}.pt"


def _mark(directory: Path) -> None:
    """Make ``directory`` rlvr's: :func:`clean_leftovers` may remove it once left over."""
    (directory / MARK).write_text(
        "made by rlvr: removed when left over by an interrupted checkpoint save or deletion\n",
        encoding="utf-8",
    )


def _unused(path: Path) -> Path:
    """``path``, where rlvr is about to put a directory of its own; refused when something
    is there: :func:`clean_leftovers` removed rlvr's, so it is not rlvr's to replace."""
    if path.exists():
        raise CheckpointError(
            f"{path} is in the way: rlvr names its temporary checkpoint directories so, and "
            f"this one is not rlvr's (no {MARK} file in it); move it out of {path.parent}"
        )
    return path


def clean_leftovers(output_dir: str | Path) -> list[str]:
    """Remove what killed saves or deletions left behind (``.checkpoint-*.tmp`` etc.), those
    holding rlvr's :data:`MARK` only, and say so; return their names."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    removed = sorted(
        p.name for p in root.iterdir() if _LEFTOVER.match(p.name) and (p / MARK).is_file()
    )
    for name in removed:
        shutil.rmtree(root / name, ignore_errors=True)
    if removed:
        logger.warning(
            "%s: removed %s, left by an interrupted checkpoint save or deletion",
            root,
            ", ".join(removed),
        )
    return removed


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    state: dict[str, Any],
    tensors: Mapping[str, Any] | None = None,
    save_total_limit: int | None = None,
    extra_files: dict[str, str] | None = None,
    before_complete: Callable[[], None] | None = None,
    model_state: dict[str, Any] | None = None,
) -> Path:
    """Write ``checkpoint-<step>`` atomically and prune to ``save_total_limit``; return it.

    ``state`` is the trainer's JSON-able state (data position, counters, ...), written as
    ``trainer_state.json`` with ``step`` added; ``tensors`` maps names to state dicts, each
    written as ``<name>.pt`` (``optimizer.pt``, ...). ``extra_files`` maps file names to text
    written beside (e.g. the config). ``before_complete`` runs after the files are written and
    before the marker (other ranks add theirs then). ``model_state`` replaces the model's own
    state dict (a sharded model's, gathered whole).
    """
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    clean_leftovers(root)
    tmp = _unused(tmp_dir(root, step))
    try:
        tmp.mkdir()
        _mark(tmp)  # first: from here on a kill leaves a leftover the next save removes
        if model_state is None:
            model.save_pretrained(tmp)
        else:
            model.save_pretrained(tmp, state_dict=model_state)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        for name, tensor_state in (tensors or {}).items():
            _save(tensor_state, tmp / tensor_file(name))
        _save(rng_state(), tmp / "rng_state.pt")
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        (tmp / TRAINER_STATE).write_text(
            json.dumps({**state, "step": step}, indent=2, default=str), encoding="utf-8"
        )
        _fsync_tree(tmp)
        if before_complete is not None:
            before_complete()
            _fsync_tree(tmp)  # what the other ranks wrote
        write_manifest(tmp)
        _test_sleep(step)
        with open(tmp / COMPLETE, "w", encoding="utf-8") as f:
            f.write(f"{step}\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
    except BaseException as exc:
        full = disk_full(exc, root)  # before the space is freed
        # A partial checkpoint helps nobody, and on a full disk it holds the space.
        shutil.rmtree(tmp, ignore_errors=True)
        if full is None:
            raise
        latest = latest_checkpoint(root)
        raise CheckpointError(
            f"cannot write checkpoint-{step} in {root}: {full}; the partial {tmp.name} was "
            "removed. Free some space, then --resume continues from "
            + (latest.name if latest is not None else "the start (no checkpoint yet)")
        ) from None
    final = root / f"checkpoint-{step}"
    if final.exists():  # the same step saved again: swap atomically, then drop the old one
        old = _unused(root / f".checkpoint-{step}.old")
        _mark(final)  # it may predate the marker
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    _fsync_dir(root)

    if save_total_limit is not None:
        prune(root, save_total_limit)
    return final


#: errno values that mean the disk (or a quota, or a file size limit) is full.
_FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
_FULL[errno.EFBIG] = "file too large (a file size limit, ulimit -f?)"


def disk_full(exc: BaseException, where: Path) -> str | None:
    """``"no space left on device (ENOSPC)"`` (or the quota or file size limit) when ``exc``
    comes from a full disk, else None. torch reports a failed write as ``unexpected pos``
    (the OSError is only its context), safetensors as ``os error 28``; when neither says
    why, a device with no free space does."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _FULL:
            return f"{_FULL[seen.errno]} ({errno.errorcode[seen.errno]})"
        for code, text in _FULL.items():
            if f"os error {code})" in str(seen):
                return f"{text} ({errno.errorcode[code]})"
        seen = seen.__cause__ or seen.__context__
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return None
    if free < 64 * 1024:  # nothing a checkpoint file could use
        return f"{_FULL[errno.ENOSPC]} ({errno.errorcode[errno.ENOSPC]})"
    return None


def _save(obj: Any, file: Path) -> None:
    """torch.save through a Python file: a failed write then raises the OSError (as the
    context of torch's own error), which names a full disk."""
    with open(file, "wb") as f:
        torch.save(obj, f)


def prune(output_dir: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints (each renamed away first); the
    best one ``training.keep_best`` recorded (:func:`best_checkpoint`) is kept besides."""
    root = Path(output_dir)
    best = best_checkpoint(root)
    others = [p for p in list_checkpoints(root) if best is None or p != best["path"]]
    for path in others[:-keep] if keep > 0 else []:
        doomed = _unused(root / f".{path.name}.del")
        _mark(path)  # it may predate the marker
        os.rename(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    _fsync_dir(root)


# --------------------------------------------------------------------------- integrity


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, HASH).hexdigest()


def write_manifest(directory: Path) -> None:
    """Record every file of ``directory`` (relative path, size, hash) in its manifest."""
    files = {
        p.relative_to(directory).as_posix(): {"bytes": p.stat().st_size, HASH: _digest(p)}
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, COMPLETE, MARK)
    }
    with open(directory / MANIFEST, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "hash": HASH, "files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def damage(path: str | Path) -> str | None:
    """What is wrong with checkpoint ``path`` (a file missing, changed since it was written, or
    unreadable trainer state), or None when it is intact. Reads every file once. A checkpoint
    written before manifests existed is checked for its trainer state only."""
    path = Path(path)
    manifest = path / MANIFEST
    if manifest.is_file():
        try:
            listed = json.loads(manifest.read_text(encoding="utf-8"))["files"]
            algorithm = HASH
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            return f"{MANIFEST}: unreadable ({type(exc).__name__}: {exc})"
        for name, meta in listed.items():
            file = path / name
            if not file.is_file():
                return f"{name}: missing (the manifest lists it)"
            size = file.stat().st_size
            if size != meta.get("bytes"):
                return (
                    f"{name}: {size} bytes, the manifest says {meta.get('bytes')} (truncated "
                    "or changed after it was written)"
                )
            if _digest(file) != meta.get(algorithm):
                return (
                    f"{name}: its {algorithm} differs from the manifest's "
                    "(changed after it was written)"
                )
    try:
        read_state(path)
    except CheckpointError as exc:
        return str(exc).removeprefix(f"{path}/")
    return None


# --------------------------------------------------------------------------- reading


def read_state(path: str | Path) -> dict[str, Any]:
    """The trainer state saved in checkpoint ``path``."""
    path = Path(path)
    if not (path / COMPLETE).is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {COMPLETE} marker)")
    file = path / TRAINER_STATE
    try:
        state = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{file}: missing") from None
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError included
        raise CheckpointError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{file}: not a JSON object")
    for key, kind in (("step", int), ("data", dict)):
        if not isinstance(state.get(key), kind):
            why = "no" if key not in state else f"a malformed ({state[key]!r})"
            raise CheckpointError(f"{file}: {why} {key!r} entry")
    return state


def load_file(file: Path, **kwargs: Any) -> Any:
    """``torch.load`` of one checkpoint file, tensors and plain containers only
    (``weights_only``: nothing in it is executed); a missing or unreadable file is a
    :class:`CheckpointError` that names it."""
    try:
        with open(file, "rb") as f:
            return torch.load(f, weights_only=True, **kwargs)
    except FileNotFoundError:
        why = "missing"
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError) as exc:
        why = "empty" if file.is_file() and file.stat().st_size == 0 else "unreadable"
        why += f" ({type(exc).__name__}: {exc})"
    raise CheckpointError(
        f"{file}: {why}; the checkpoint is damaged (move {file.parent.name} out of the output "
        "directory to resume from the one before it)"
    )


# --------------------------------------------------------------------------- data parallelism


def add_rank_files(
    directory: Path,
    dist: Dist,
    sharded: tuple[torch.nn.Module, Any] | None = None,
) -> None:
    """Every rank, while rank 0's checkpoint sits in its temporary ``directory`` (rank 0 from
    ``save_checkpoint``'s ``before_complete``): the optimizer shards of a sharded
    ``(model, optimizer)``, and each other rank's RNG state. Rank 0 writes the COMPLETE marker
    only after the second barrier, so a kill here leaves no complete checkpoint."""
    dist.barrier()  # rank 0 created the directory and wrote its files
    if sharded is not None:
        distributed.save_sharded_optimizer(*sharded, directory / distributed.OPTIMIZER_DIR)
    if not dist.is_main:
        with open(directory / rank_rng_file(dist.rank), "wb") as f:
            torch.save(rng_state(), f)
            f.flush()
            os.fsync(f.fileno())
    dist.barrier()


def check_resume(path: str | Path, dist: Dist, *, sharded: bool) -> None:
    """Refuse what cannot be resumed here: a whole optimizer state (ddp, one process) into a
    sharded run. Another number of ranks is fine (the data position is global, the sampling
    seeds are drawn per step and rank, the sharded optimizer state is resharded); the
    caller warns when the global batch changes with it."""
    if sharded and not (Path(path) / distributed.OPTIMIZER_DIR).is_dir():
        saved = int(read_state(path).get("world_size", 1))
        raise CheckpointError(
            f"{path} holds a whole optimizer state (written by {saved} rank(s) without fsdp); "
            "this run shards it (training.parallelism: fsdp on several ranks): resume with "
            "training.parallelism: ddp, or start a new run from its weights "
            "(model.name_or_path: the checkpoint directory)"
        )


__all__ = [
    "add_rank_files",
    "check_resume",
    "COMPLETE",
    "CheckpointError",
    "clean_leftovers",
    "latest_checkpoint",
    "best_checkpoint",
    "record_best",
    "list_checkpoints",
    "load_file",
    "MANIFEST",
    "MARK",
    "damage",
    "disk_full",
    "write_manifest",
    "prune",
    "rank_rng_file",
    "read_state",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
    "tensor_file",
    "tmp_dir",
]
