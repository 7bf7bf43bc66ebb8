"""Data parallelism over ``torch.distributed``: one process per rank, launched by ``torchrun``.

``torchrun --nproc-per-node N -m rlvr train run.yaml`` (or ``rlvr train --nproc-per-node N``)
sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``; :func:`init_from_env` joins the
process group (``nccl`` on CUDA, ``gloo`` on CPU). Without those variables everything here is a
no-op and rlvr runs in one process as before.

Who owns what, per rank: a full replica of the policy (and reference and value model), its own
backend and its own reward workers. The prompt sampler is global: every rank holds the same
sampler state, takes the whole step's prompts and keeps its contiguous slice
(:meth:`Dist.shard`), so a prompt's group never spans ranks and the data order does not depend
on the number of ranks.

The collectives of one step (``W`` ranks, ``P`` parameters):

- rollout: one 2-integer all-reduce per generation round (groups kept; dynamic sampling runs
  rounds until the *global* count is reached, so every rank runs the same rounds);
- ``prepare``: :func:`rlvr.functional.batch_sum` all-reduces the sums behind batch-level
  statistics (``scale_rewards: batch``, whitening): a few scalars;
- update: the token and sequence counts (one all-reduce), then per optimizer update the
  finite flag and loss (one), and one all-reduce of the gradients (``P`` floats, summed: each
  rank's loss is already normalised by the global counts, so the sum is the gradient of one
  process holding the whole batch). Micro-batches run without communication, so ranks with
  different numbers of micro-batches (dynamic sampling) cannot deadlock;
- metrics: one ``all_gather_object`` of the step's metrics (and samples when logged);
- the stop flag (Ctrl-C/SIGTERM seen by any rank): one all-reduce.

A rank that dies makes the launcher (``torchrun``) stop the others; a collective that still
waits on a vanished peer fails after ``RLVR_DIST_TIMEOUT`` seconds (default 600). A launcher
that dies (``kill -9`` of ``torchrun`` or of ``rlvr train --nproc-per-node``) takes its ranks
with it on Linux (:mod:`rlvr.parallel.launcher`): they would otherwise train on, orphaned, and
write checkpoints nobody asked for.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from rlvr import functional
from rlvr.parallel.launcher import tie_to_launcher
from rlvr.parallel.safe_dcp import SafeReader, WeightsOnlyPlanner

logger = logging.getLogger("rlvr.parallel.distributed")

#: Seconds a collective waits for a missing rank before it fails.
TIMEOUT_ENV = "RLVR_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Dist:
    """This process's place in the job; ``Dist()`` is the single-process job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    #: where collective tensors live (CPU for gloo, this rank's GPU for nccl).
    device: torch.device = torch.device("cpu")
    #: the process group of these collectives (None: the job's default group)
    group: Any = None

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def own_group(self) -> Dist:
        """The same place in the job with a (gloo) process group of its own, for collectives
        another thread runs beside the main thread's (asynchronous rollouts): in one group
        the two threads' collectives would interleave differently on each rank. Every rank
        must call it, in the same order."""
        if not self.enabled:
            return self
        group = tdist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s()))
        return replace(self, group=group, device=torch.device("cpu"))

    # ------------------------------------------------------------------ collectives

    def all_sum(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over ranks (a new tensor on ``x``'s device)."""
        if not self.enabled:
            return x

        y = x.detach().to(self.device).clone()
        tdist.all_reduce(y, op=tdist.ReduceOp.SUM, group=self.group)
        return y.to(x.device)

    def sum_numbers(self, values: Sequence[float]) -> list[float]:
        """Each of ``values`` summed over ranks, in one all-reduce (float64)."""
        if not self.enabled:
            return [float(v) for v in values]
        out = self.all_sum(torch.tensor([float(v) for v in values], dtype=torch.float64))
        return [float(v) for v in out.tolist()]

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any."""
        return self.sum_numbers([1.0 if flag else 0.0])[0] > 0

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if not self.enabled:
            return [obj]

        out: list[Any] = [None] * self.world_size
        tdist.all_gather_object(out, obj, group=self.group)
        return out

    def barrier(self) -> None:
        if self.enabled:
            tdist.barrier(group=self.group)

    def max_count(self, n: int) -> int:
        """The largest ``n`` over ranks."""
        if not self.enabled:
            return n
        return int(max(self.gather(n)))

    def sum_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over ranks, in one flat all-reduce (a parameter with
        no gradient on this rank contributes zeros, so every rank calls the same collective).
        Sharded (FSDP) parameters are left alone: their backward already reduced them."""
        params = [p for p in params if not _is_sharded(p)]
        if not self.enabled or not params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        has = torch.tensor([float(p.grad is not None) for p in params], device=grads[0].device)
        flat = self.all_sum(torch.cat([*(g.reshape(-1).float() for g in grads), has]))
        offset = 0
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            n = g.numel()
            # No gradient on any rank stays None (the optimizer then leaves it alone, as in
            # one process: e.g. the policy during VAPO's value-only warm-up).
            has_any = bool(flat[flat.numel() - len(params) + i] > 0)
            p.grad = flat[offset : offset + n].view_as(g).to(g.dtype) if has_any else None
            offset += n

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Make every rank's ``module`` rank 0's (replicas start equal, as DDP does)."""
        if not self.enabled:
            return

        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                if _is_sharded(t):
                    continue
                buf = t.detach().to(self.device).clone()
                tdist.broadcast(buf, src=0, group=self.group)
                t.copy_(buf.to(t.device))

    # ------------------------------------------------------------------ data

    def shard(self, items: Sequence[Any]) -> tuple[list[Any], int]:
        """This rank's contiguous slice of ``items`` and its offset; the first
        ``len(items) % world_size`` ranks get one more."""
        n, w, r = len(items), self.world_size, self.rank
        base, extra = divmod(n, w)
        start = r * base + min(r, extra)
        stop = start + base + (1 if r < extra else 0)
        return list(items[start:stop]), start


def _is_sharded(t: torch.Tensor) -> bool:
    return type(t).__name__ == "DTensor" or type(getattr(t, "data", None)).__name__ == "DTensor"


_current = Dist()


def current() -> Dist:
    """The job this process belongs to (``Dist()`` outside ``torchrun``)."""
    return _current


def launched() -> bool:
    """True when a launcher (torchrun, accelerate, a cluster) started several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def timeout_s() -> float:
    raw = os.environ.get(TIMEOUT_ENV)
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None


@contextlib.contextmanager
def data_parallel() -> Iterator[Dist]:
    """Join the process group the launcher describes (when it describes one), route batch
    statistics through it, and leave it on exit."""
    global _current
    if not launched():
        yield _current
        return

    tie_to_launcher()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    tdist.init_process_group(
        backend="nccl" if cuda else "gloo",
        timeout=datetime.timedelta(seconds=timeout_s()),
    )
    _current = Dist(rank=rank, world_size=world, local_rank=local, device=device)
    if rank != 0:  # one console: the other ranks report errors only
        logging.getLogger("rlvr").setLevel(logging.ERROR)
    logger.info("rank %d of %d (%s)", rank, world, "nccl" if cuda else "gloo")
    try:
        with functional.batch_reducer(_current.all_sum):
            yield _current
        # Tear down together: a rank that leaves while another still works (rank 0 closes
        # the logs after the last checkpoint) was seen to abort in gloo's teardown ("terminate
        # called without an active exception"), failing a finished job. Only on success: after
        # an error the other ranks may never arrive. (A closed vLLM engine may have destroyed
        # the group already.)
        if tdist.is_initialized():
            tdist.barrier()
    finally:
        _current = Dist()
        with contextlib.suppress(Exception):
            tdist.destroy_process_group()


# --------------------------------------------------------------------------- FSDP2


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a Hugging Face causal LM (``model.model.layers`` and kin)."""
    for path in ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers"):
        obj: Any = model
        for name in path.split("."):
            obj = getattr(obj, name, None)
        if isinstance(obj, torch.nn.ModuleList) and len(obj):
            return list(obj)
    raise ValueError(
        f"training.parallelism: fsdp found no decoder layers in {type(model).__name__} "
        "(looked for model.layers, transformer.h, gpt_neox.layers); use parallelism: ddp"
    )


def shard(
    model: torch.nn.Module, dist: Dist, dtype: torch.dtype, *, cpu_offload: bool = False
) -> None:
    """FSDP2: ``fully_shard`` every decoder layer, then the whole model. On CUDA with a 16-bit
    compute ``dtype``, the shards stay as they are (float32 for trained weights) and each
    layer's whole weights are gathered in ``dtype``; gradients reduce in float32 (untested
    here)."""
    kwargs: dict[str, Any] = {}
    if dist.device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)


def fsdp_modules(model: torch.nn.Module) -> list[Any]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(model: torch.nn.Module) -> Iterator[None]:
    """Whole parameters for generation: ranks generate different numbers of tokens, so the
    per-forward all-gathers of a sharded model would not line up; one gather up front does."""
    modules = fsdp_modules(model)
    for m in modules:
        m.unshard()
        m.set_reshard_after_forward(False)
    try:
        yield
    finally:
        for m in modules:
            m.reshard()
            m.set_reshard_after_forward(True)


def full_state_dict(model: torch.nn.Module) -> dict[str, Any]:
    """The whole model's weights on CPU, on rank 0 (empty elsewhere); every rank must call."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    seen: set[int] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:  # tied (lm_head = embeddings): saved once, as save_pretrained does
            state.pop(name, None)
        seen.add(id(p))
    return state


#: The sharded optimizer state's directory inside a checkpoint (torch.distributed.checkpoint).
OPTIMIZER_DIR = "optimizer"


class ShardedCheckpointError(RuntimeError):
    """A sharded optimizer state that cannot be read (the message names the directory)."""


def save_sharded_optimizer(model: torch.nn.Module, optimizer: Any, directory: Path) -> None:
    """Every rank writes its own shard of the optimizer state, nothing is gathered (a
    collective: every rank must call)."""
    dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)}, checkpoint_id=directory)


def load_sharded_optimizer(model: torch.nn.Module, optimizer: Any, directory: Path) -> None:
    """Read :func:`save_sharded_optimizer`'s state into ``optimizer``, resharded to this run's
    ranks (any number, one process included). Nothing in the files is executed
    (:mod:`rlvr.parallel.safe_dcp`); a planted payload raises ``pickle.UnpicklingError``."""
    # Read first: DCP would log a refused metadata file as missing and look for others.
    SafeReader(directory).read_metadata()
    # The layout to fill: this rank's shards (an empty optimizer is initialised first).
    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    try:
        dcp.load(state, storage_reader=SafeReader(directory), planner=WeightsOnlyPlanner())
    except CheckpointException as exc:  # a BaseException: one per rank that failed
        causes = [f[0] if isinstance(f, tuple) else f for f in exc.failures.values()]
        why = "; ".join(f"{type(c).__name__}: {c}" for c in causes) or str(exc)
        raise ShardedCheckpointError(f"{directory}: {why}") from None
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "TIMEOUT_ENV",
    "OPTIMIZER_DIR",
    "Dist",
    "ShardedCheckpointError",
    "current",
    "data_parallel",
    "launched",
    "load_sharded_optimizer",
    "save_sharded_optimizer",
    "timeout_s",
]
