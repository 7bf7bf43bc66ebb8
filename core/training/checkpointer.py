"""A run's checkpointer: one object, built from the run's stateful pieces, that saves them all
and restores them all.

The pieces are named :class:`~rlvr.training.stateful.Stateful` objects in two mappings: those
whose state is small and JSON-able go into ``trainer_state.json`` under their name (``data``:
the prompt order, ``collapse``: the guard's history), those holding tensors each into
``<name>.pt`` (``optimizer``, ``scheduler``, ``value_model``); the run's own counters (step,
bad steps, last metrics) are the file's top level. Adding a piece to a mapping is all a resume
needs. The policy is the exception: its weights are written by ``save_pretrained`` (the
checkpoint is a model directory ``from_pretrained`` loads) and come back when the models load
(:mod:`rlvr.training.models`). Writing atomically, the manifest and the fallback to the newest
intact checkpoint are :mod:`rlvr.outputs.checkpoint`'s and :mod:`rlvr.outputs.resume`'s.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rlvr.api.errors import TrainingError
from rlvr.outputs import checkpoint as ckpt
from rlvr.outputs.resume import check_vocabulary, warn_changes
from rlvr.parallel import distributed
from rlvr.parallel.distributed import Dist
from rlvr.training.stateful import Stateful

logger = logging.getLogger("rlvr.training.checkpointer")

#: The tensor piece that FSDP shards: every rank writes its part (``optimizer/``).
OPTIMIZER = "optimizer"


class Checkpointer:
    """Saves and restores ``checkpoint-<step>`` in ``output_dir``: the policy's weights and
    tokenizer, ``progress`` (the top level of ``trainer_state.json``), every piece of
    ``state`` (JSON, under its name) and of ``tensors`` (``<name>.pt``). ``facts`` describe
    the run for the resume's warnings (world size, planned steps, ...) and are not restored.
    ``sharded``: the policy and optimizer are FSDP's (every rank takes part in a save)."""

    def __init__(
        self,
        output_dir: Path,
        *,
        dist: Dist,
        model: Any,
        tokenizer: Any,
        progress: Stateful,
        state: Mapping[str, Stateful],
        tensors: Mapping[str, Stateful],
        facts: Mapping[str, Any],
        save_steps: int,
        save_total_limit: int | None = None,
        sharded: bool = False,
        extra_files: Mapping[str, str] | None = None,
    ) -> None:
        self.output_dir = output_dir
        self.dist = dist
        self.model, self.tokenizer = model, tokenizer
        self.progress = progress
        self.state, self.tensors = dict(state), dict(tensors)
        self.facts = dict(facts)
        self.save_steps, self.save_total_limit = save_steps, save_total_limit
        self.sharded = sharded
        self.extra_files = dict(extra_files or {})
        #: the step of the last checkpoint saved or resumed from (None: none yet)
        self.last_saved: int | None = None

    def should_save(self, step: int) -> bool:
        """Is ``step`` one that ``training.save_steps`` saves?"""
        return step % self.save_steps == 0

    def saved(self, step: int) -> bool:
        """Is ``checkpoint-<step>`` the last one written (nothing to save again)?"""
        return self.last_saved == step

    def resumes(self) -> str:
        """Where ``--resume`` would continue from, for a message."""
        if self.last_saved is None:
            return "no checkpoint was saved before (training.save_steps), so a new run starts over"
        return f"--resume continues from {self.output_dir / f'checkpoint-{self.last_saved}'}"

    # ------------------------------------------------------------------ saving

    def save(self, step: int) -> Path:
        """Write ``checkpoint-<step>`` (every rank calls: with several, it is a collective)."""
        with _saved_as_for_inference(self.model):
            weights = None
            sharded = (self.model, self.tensors[OPTIMIZER]) if self.sharded else None
            if sharded:  # a collective: every rank gathers the weights, rank 0 keeps them
                weights = distributed.full_state_dict(self.model)
            tmp = ckpt.tmp_dir(self.output_dir, step)

            def rank_files() -> None:
                ckpt.add_rank_files(tmp, self.dist, sharded)

            if not self.dist.is_main:
                rank_files()
                path = self.output_dir / f"checkpoint-{step}"
            else:
                path = ckpt.save_checkpoint(
                    self.output_dir,
                    step,
                    model=self.model,
                    tokenizer=self.tokenizer,
                    model_state=weights,
                    tensors={
                        name: piece.state_dict()
                        for name, piece in self.tensors.items()
                        if not (sharded and name == OPTIMIZER)  # its shards: rank_files
                    },
                    state={
                        **self.facts,
                        **self.progress.state_dict(),
                        **{name: piece.state_dict() for name, piece in self.state.items()},
                    },
                    save_total_limit=self.save_total_limit,
                    extra_files=self.extra_files,
                    before_complete=rank_files,
                )
        self.last_saved = step
        return path

    # ------------------------------------------------------------------ restoring

    def restore(self, path: Path) -> int:
        """Load every piece back from checkpoint ``path`` (and this rank's RNG states); return
        its step."""
        ckpt.check_resume(path, self.dist, sharded=self.sharded)
        state = ckpt.read_state(path)
        shards = path / distributed.OPTIMIZER_DIR
        # The sharded state (DCP, whose metadata is a pickle) is read only by a sharded run, or
        # to reshard an FSDP checkpoint that has no whole optimizer.pt; a one-process checkpoint
        # never makes a run read an optimizer/ directory found in it.
        whole = (path / ckpt.tensor_file(OPTIMIZER)).is_file()
        use_shards = shards.is_dir() and (self.sharded or not whole)
        try:
            for name, piece in self.tensors.items():
                if name == OPTIMIZER and use_shards:  # resharded to this run's ranks
                    distributed.load_sharded_optimizer(self.model, piece, shards)
                else:
                    piece.load_state_dict(
                        ckpt.load_file(path / ckpt.tensor_file(name), map_location="cpu")
                    )
            # A rank the saving run did not have: every step reseeds from (seed, step, rank).
            rng_file = path / ckpt.rank_rng_file(self.dist.rank)
            if rng_file.is_file():
                ckpt.set_rng_state(ckpt.load_file(rng_file))
        except ckpt.CheckpointError:  # a file that cannot be read: the message names it
            raise
        except (pickle.UnpicklingError, distributed.ShardedCheckpointError) as exc:
            raise ckpt.CheckpointError(
                f"{exc}; the checkpoint's sharded optimizer state ({shards}) is damaged or not "
                "rlvr's: resume from another checkpoint"
            ) from None
        except (ValueError, RuntimeError, KeyError) as exc:  # e.g. another algorithm's value model
            raise TrainingError(
                f"cannot resume from {path}: its optimizer or value model does not fit this "
                f"run's ({type(exc).__name__}: {exc}). The config differs from the checkpoint's "
                "in a way that changes what trains (see the warning above); resume with the "
                f"config the run was started with ({path / 'rlvr_config.yaml'}), or set "
                "training.output_dir to a new directory for a new run"
            ) from None
        check_vocabulary(path, state, self.model, self.tokenizer)
        warn_changes(
            state,
            self.dist.world_size,
            int(self.facts["prompts_per_step"]),
            int(self.facts["max_steps"]),
        )
        self.progress.load_state_dict(state)
        for name, piece in self.state.items():
            piece.load_state_dict(state.get(name) or {})
        self.last_saved = int(state["step"])
        logger.info("resumed from %s (step %d)", path, self.last_saved)
        return self.last_saved


@contextlib.contextmanager
def _saved_as_for_inference(model: Any) -> Iterator[None]:
    """Gradient checkpointing turns ``config.use_cache`` off; a saved checkpoint should still
    generate with the KV cache when loaded for inference."""
    config: Any = getattr(model, "config", None)
    before = getattr(config, "use_cache", None)
    if before is False:
        config.use_cache = True
    try:
        yield
    finally:
        if before is False:
            config.use_cache = before


__all__ = ["OPTIMIZER", "Checkpointer"]
