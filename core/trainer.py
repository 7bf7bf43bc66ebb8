"""The training loop: config -> plugins -> rollout -> rewards -> advantages -> loss -> update.

:func:`train` is the whole public API. The trainer knows plugins only through their records
(``host``) and the runtime protocols (:mod:`rlvr.protocols`): a backend's ``Generator``, an
algorithm's ``AlgorithmImpl``, rewards through :class:`rlvr.scoring.Scorer`.

One step:

1. rollout: take ``per_device_train_batch_size * gradient_accumulation_steps`` prompts, sample
   ``num_generations`` completions each, score them (one reward pool for the whole run);
   when the algorithm's ``select`` filters groups out (dynamic sampling), generate more with
   new prompts until the step has its prompts' worth of groups or ``max_generation_rounds``;
2. under ``no_grad``: old log-probs, reference log-probs, old values, each only when the
   algorithm's requirements ask for them; then ``algorithm.prepare``;
3. ``num_iterations`` optimizer updates, each a pass over micro-batches of
   ``per_device_train_batch_size * num_generations`` completions with the loss normalised by
   the whole step's token/sequence counts (so accumulation equals one big batch);
4. metrics, samples, checkpoint every ``save_steps``; the backend gets the new weights.

Reproducibility: the RNGs are reseeded at the start of every step from ``(seed, step)`` and the
backend gets a per-step (and per-round) sampling seed, so a step's randomness does not depend
on what ran before it; the data order is a seeded permutation per epoch whose position is
checkpointed. A run interrupted and resumed therefore logs the same metrics as an
uninterrupted one (on CPU, up to timing fields).

Stopping: Ctrl-C or SIGTERM finishes the step, saves a checkpoint and returns. A step that
raises (a second Ctrl-C, an error) before its first optimizer update is forgotten and the run
saved at the step before it; a non-finite loss or gradient norm skips the update, and
``max_bad_steps`` of them in a row save a checkpoint and stop with :class:`TrainingError`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr import checkpoint as ckpt
from rlvr.config import dump, requirements
from rlvr.data import PromptSampler, PromptSet, load_rows, require_fields
from rlvr.errors import RlvrError
from rlvr.functional import kl_penalty, logprob_gap_stats, masked_mean
from rlvr.metrics import (
    METRICS_FILE,
    MetricsLogger,
    length_metrics,
    peak_memory_mb,
    reporters,
    reward_metrics,
)
from rlvr.protocols import RolloutBatch, RunInfo, SamplingParams
from rlvr.records import Sample
from rlvr.reward_errors import RewardErrorLog
from rlvr.scoring import RewardStats, Scorer, merge_summaries, score_entries
from rlvr.summary import run_summary

logger = logging.getLogger("rlvr.trainer")


class TrainingError(RlvrError, RuntimeError):
    """Training cannot go on (non-finite losses, nothing to train on, a bad resume...)."""


# --------------------------------------------------------------------------- small helpers


def step_seed(seed: int, step: int, round_: int = 0) -> int:
    """A 31-bit seed fixed by ``(seed, step, round)``, unrelated across different triples."""
    state = np.random.SeedSequence([seed & 0xFFFFFFFF, step, round_]).generate_state(1)
    return int(state[0] & 0x7FFFFFFF)


def _seed_everything(seed: int) -> None:
    from transformers import set_seed

    set_seed(seed)


def _finite(x: float) -> bool:
    return math.isfinite(x)


def _weighted_mean(pairs: Sequence[tuple[float, float]]) -> float:
    total = sum(w for _, w in pairs)
    if total <= 0:
        return sum(v for v, _ in pairs) / max(len(pairs), 1)
    return sum(v * w for v, w in pairs) / total


def _disable_dropout(model: torch.nn.Module) -> None:
    """Zero every dropout: RL ratios compare log-probs of two forward passes, which dropout
    would make disagree even with identical weights."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for name in ("attention_dropout", "dropout_p"):
            if isinstance(getattr(m, name, None), float):
                setattr(m, name, 0.0)


def _pad_right(rows: Sequence[Sequence[Any]], width: int, value: Any, dtype) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = torch.tensor(list(r), dtype=dtype)
    return out


def _pad_left(rows: Sequence[Sequence[int]], width: int, value: int) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            out[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
    return out


def _trim(batch: RolloutBatch) -> RolloutBatch:
    """Drop padding columns every row of ``batch`` has (micro-batches need not be as wide as
    the step); token-level fields keep their alignment with ``completion_ids``."""
    width = batch.completion_ids.shape[1]
    t = max(int(batch.completion_mask.sum(1).max().item()) if len(batch) else 1, 1)
    p = max(int(batch.prompt_mask.sum(1).max().item()) if len(batch) else 1, 1)
    out = replace(batch, prompt_ids=batch.prompt_ids[:, -p:], prompt_mask=batch.prompt_mask[:, -p:])
    if t < width:
        for name in (
            "completion_ids",
            "completion_mask",
            "sampler_logp",
            "old_logp",
            "ref_logp",
            "old_values",
            "advantages",
            "returns",
            "loss_mask",
        ):
            value = getattr(out, name)
            if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[1] == width:
                setattr(out, name, value[:, :t])
    return out


def _widen(x: torch.Tensor, width: int) -> torch.Tensor:
    if x.shape[1] == width:
        return x
    pad = torch.zeros(x.shape[0], width - x.shape[1], dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=1)


# --------------------------------------------------------------------------- rollouts


@dataclass
class Completion:
    """One generated completion with everything the step needs about it."""

    prompt_index: int
    group: int
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    truncated: bool
    score: float = 0.0
    rewards: dict[str, float | None] = field(default_factory=dict)
    sampler_logp: list[float] | None = None
    kept: bool = True


def build_batch(items: Sequence[Completion], labels: Sequence[str], pad_id: int) -> RolloutBatch:
    """The tensors of ``items`` (CPU): prompts left-padded, completions right-padded."""
    p = max((len(c.prompt_ids) for c in items), default=1)
    t = max(max((len(c.token_ids) for c in items), default=1), 1)
    prompt_ids = _pad_left([c.prompt_ids for c in items], p, pad_id)
    prompt_mask = _pad_left([[1] * len(c.prompt_ids) for c in items], p, 0)
    completion_ids = _pad_right([c.token_ids for c in items], t, pad_id, torch.long)
    completion_mask = _pad_right([[1] * len(c.token_ids) for c in items], t, 0, torch.long)
    components = {
        label: torch.tensor(
            [math.nan if c.rewards.get(label) is None else c.rewards[label] for c in items],
            dtype=torch.float32,
        )
        for label in labels
    }
    sampler_logp = None
    if items and all(c.sampler_logp is not None for c in items):
        sampler_logp = _pad_right([c.sampler_logp for c in items], t, 0.0, torch.float32)
    return RolloutBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        group_ids=torch.tensor([c.group for c in items], dtype=torch.long),
        scores=torch.tensor([c.score for c in items], dtype=torch.float32),
        lengths=torch.tensor([len(c.token_ids) for c in items], dtype=torch.long),
        truncated=torch.tensor([c.truncated for c in items], dtype=torch.bool),
        reward_components=components,
        sampler_logp=sampler_logp,
    )


@dataclass
class Rollout:
    """What generation and scoring produced for one step."""

    kept: list[Completion]
    generated: list[Completion]
    rounds: int
    groups_filtered: int
    #: per-reward statistics over every generated completion (all rounds).
    summary: dict[str, Any]
    generation_time: float
    scoring_time: float


# --------------------------------------------------------------------------- stop requests


class _StopFlag:
    """First SIGINT/SIGTERM: finish the step, save, stop. Second SIGINT: abort at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True
        logger.warning(
            "stop requested: finishing this step, then saving a checkpoint "
            "(Ctrl-C again stops at once; the step in progress is then lost)"
        )

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# --------------------------------------------------------------------------- the trainer


class Trainer:
    """One training run; :func:`train` builds and runs it."""

    def __init__(self, config: Any, host: Any, *, resume: bool = False, progress: bool = True):
        self.config = config
        self.host = host
        self.t = config.training
        self.resume = resume
        self.progress = progress
        self.output_dir = Path(self.t.output_dir)
        self.req = requirements(config, host)
        self.step = 0
        self.bad_steps = 0
        self.last_metrics: dict[str, Any] = {}
        self._last_saved: int | None = None
        self._closers: list[Any] = []
        self._step_start = (0, 0)
        self._updating = False

    # ------------------------------------------------------------------ setup

    def setup(self) -> None:
        """Everything before the first step, cheap checks first, models last."""
        t, config = self.t, self.config
        reporters(t.report_to)  # a missing tensorboard/wandb fails now, not after loading
        resume_from = self._resume_point()
        ckpt.clean_leftovers(self.output_dir)

        rows = load_rows(config.data)
        require_fields(
            rows,
            config.rewards,
            self.host,
            prompt_field=config.data.prompt_field,
            source=f"data.path {config.data.path!r}",
        )
        entries = score_entries(config, self.host)
        self.labels = [e.label for e in entries]
        # Started before the models load, so the workers build their rewards meanwhile.
        self.scorer = Scorer(entries, workers=t.reward_workers)
        self._closers.append(self.scorer)
        self.reward_errors = RewardErrorLog(
            entries,
            self.output_dir,
            max_error_frac=t.max_reward_error_frac,
            echo=lambda message: self.log.write(message),
        )

        self.prompts_per_step = t.per_device_train_batch_size * t.gradient_accumulation_steps
        if t.max_steps > 0:
            self.max_steps = t.max_steps
        else:
            self.max_steps = max(
                1, math.ceil(t.num_train_epochs * len(rows) / self.prompts_per_step)
            )

        from rlvr.modeling import (
            completion_logprobs,
            enable_gradient_checkpointing,
            load_policy,
            resolve_device_dtype,
        )

        self._completion_logprobs = completion_logprobs
        _seed_everything(t.seed)
        self.device, self.dtype = resolve_device_dtype(config.model.dtype)
        model_cfg = config.model
        if resume_from is not None:
            model_cfg = config.model.model_copy(
                update={"name_or_path": str(resume_from), "gguf_file": None, "revision": None}
            )
        self.policy, self.tokenizer = load_policy(model_cfg, device=self.device, dtype=self.dtype)
        _disable_dropout(self.policy)
        self.pad_id = self._pad_id()
        self.prompts = PromptSet(rows, config.data, self.tokenizer, t.max_prompt_length)
        self.sampler = PromptSampler(len(rows), seed=t.seed, shuffle=config.data.shuffle)

        self.run_info = RunInfo(
            max_completion_length=t.max_completion_length,
            num_generations=t.num_generations,
            seed=t.seed,
            extra={
                "max_steps": self.max_steps,
                "learning_rate": t.learning_rate,
                "per_device_train_batch_size": t.per_device_train_batch_size,
                "gradient_accumulation_steps": t.gradient_accumulation_steps,
                "max_prompt_length": t.max_prompt_length,
                "temperature": t.temperature,
                "output_dir": str(self.output_dir),
                "model": config.model.model_dump(),
                "device": str(self.device),
                "dtype": str(self.dtype).removeprefix("torch."),
            },
        )
        record = self.host.algorithms[config.algorithm.name]
        self.algo = record.factory(config.algorithm.params, self.run_info)
        self.areq = getattr(self.algo, "requirements", self.req)

        self.reference = None
        if self.areq.reference_model:
            if resume_from is None:
                self.reference = copy.deepcopy(self.policy)
            else:
                self.reference, _ = load_policy(config.model, device=self.device, dtype=self.dtype)
            self.reference.eval().requires_grad_(False)
            _disable_dropout(self.reference)

        self.value_model = None
        if self.areq.value_model:
            self.value_model = self.algo.build_value_model(self.policy).to(self.device)
            _disable_dropout(self.value_model)

        if t.gradient_checkpointing:
            enable_gradient_checkpointing(self.policy)
            if self.value_model is not None:
                self.value_model.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False}
                )

        self.optimizer = self._build_optimizer()
        self.updates_per_step = max(1, int(getattr(self.algo, "num_iterations", 1)))
        self.scheduler = self._build_scheduler()

        if resume_from is not None:
            state = ckpt.load_checkpoint(
                resume_from,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                value_model=self.value_model,
            )
            self.step = int(state["step"])
            self.bad_steps = int(state.get("bad_steps", 0))
            self.sampler.load_state_dict(state["data"])
            self.last_metrics = dict(state.get("metrics") or {})
            self._last_saved = self.step
            if state.get("max_steps") not in (None, self.max_steps):
                logger.warning(
                    "resuming a run planned for %s steps with max_steps=%d",
                    state.get("max_steps"),
                    self.max_steps,
                )
            logger.info("resumed from %s (step %d)", resume_from, self.step)

        backend = self.host.backends[config.backend.name]
        self.generator = backend.factory(
            config.backend.params, self.run_info, self.policy, self.tokenizer
        )
        self._closers.append(self.generator)

        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.config_text = dump(config)
        (self.output_dir / "config.yaml").write_text(self.config_text, encoding="utf-8")
        self.log = MetricsLogger(
            self.output_dir,
            report_to=t.report_to,
            max_steps=self.max_steps,
            start_step=self.step,
            logging_steps=t.logging_steps,
            progress=self.progress,
            config=config.model_dump(mode="json"),
        )
        self._closers.append(self.log)

    def _resume_point(self) -> Path | None:
        found = ckpt.latest_checkpoint(self.output_dir)
        if self.resume:
            if found is None:
                raise TrainingError(
                    f"--resume: no complete checkpoint in {self.output_dir} (looked for "
                    "checkpoint-<step> directories with a COMPLETE marker)"
                )
            return found
        if found is not None or (self.output_dir / METRICS_FILE).is_file():
            raise TrainingError(
                f"{self.output_dir} already holds a run; pass --resume to continue it, or set "
                "training.output_dir to a new directory (rlvr never overwrites a run)"
            )
        return None

    def _pad_id(self) -> int:
        tok = self.tokenizer
        for value in (getattr(tok, "pad_token_id", None), getattr(tok, "eos_token_id", None)):
            if isinstance(value, int):
                return value
        return 0

    def _build_optimizer(self) -> torch.optim.Optimizer:
        t = self.t
        decay, no_decay = [], []
        for p in self.policy.parameters():
            if p.requires_grad:
                (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [
            {"params": decay, "weight_decay": t.weight_decay, "lr": t.learning_rate},
            {"params": no_decay, "weight_decay": 0.0, "lr": t.learning_rate},
        ]
        if self.value_model is not None:
            policy_ids = {id(p) for p in self.policy.parameters()}
            value_params = [
                p
                for p in self.value_model.parameters()
                if p.requires_grad and id(p) not in policy_ids
            ]
            value_lr = getattr(self.algo, "value_learning_rate", None) or t.learning_rate
            groups.append({"params": value_params, "weight_decay": 0.0, "lr": value_lr})
        groups = [g for g in groups if g["params"]]
        if t.optim == "sgd":
            return torch.optim.SGD(groups, lr=t.learning_rate)
        fused = self.device.type == "cuda" or t.optim == "adamw_torch_fused"
        return torch.optim.AdamW(
            groups,
            lr=t.learning_rate,
            betas=(t.adam_beta1, t.adam_beta2),
            eps=t.adam_epsilon,
            fused=fused or None,
        )

    def _build_scheduler(self) -> Any:
        from transformers import get_scheduler

        t = self.t
        total = self.max_steps * self.updates_per_step
        warmup = t.warmup_steps or math.ceil(t.warmup_ratio * total)
        kwargs = {"min_lr_rate": 0.1} if t.lr_scheduler_type == "cosine_with_min_lr" else None
        return get_scheduler(
            t.lr_scheduler_type,
            self.optimizer,
            num_warmup_steps=warmup,
            num_training_steps=total,
            scheduler_specific_kwargs=kwargs,
        )

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.device.type == "cuda":
            dtype = torch.float16 if self.dtype == torch.float16 else torch.bfloat16
            return torch.autocast("cuda", dtype=dtype)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ rollout

    def _sampling(self, round_: int) -> SamplingParams:
        return SamplingParams.from_training(self.t, step_seed(self.t.seed, self.step, round_))

    def _generate(self, indices: list[int], first_group: int, round_: int) -> list[Completion]:
        prompts = [self.prompts[i] for i in indices]
        g = self.t.num_generations
        self.policy.eval()
        with torch.no_grad():
            out = self.generator.generate([p.ids for p in prompts], g, self._sampling(round_))
        expected = len(prompts) * g
        if len(out.token_ids) != expected or len(out.texts) != expected:
            raise TrainingError(
                f"backend {self.config.backend.name!r} returned {len(out.token_ids)} "
                f"completions for {len(prompts)} prompts x {g} (expected {expected})"
            )
        items = []
        for k in range(expected):
            j = k // g
            items.append(
                Completion(
                    prompt_index=indices[j],
                    group=first_group + j,
                    prompt_ids=prompts[j].ids,
                    token_ids=list(out.token_ids[k]),
                    text=out.texts[k],
                    truncated=bool(out.truncated[k]),
                    sampler_logp=None if out.logprobs is None else list(out.logprobs[k]),
                )
            )
        return items

    def _score(self, items: list[Completion], rollout_counts: dict[str, Any]) -> None:
        samples = [
            Sample(
                completion=c.text,
                prompt=self.prompts[c.prompt_index].text,
                row=self.prompts[c.prompt_index].row,
                num_tokens=len(c.token_ids),
            )
            for c in items
        ]
        scores = self.scorer.score(samples)
        self.reward_errors.report(scores, samples, step=self.step)
        for i, c in enumerate(items):
            c.score = float(scores.total[i])
            c.rewards = {label: scores.per_reward[label][i] for label in self.labels}
        rollout_counts["summaries"].append(scores.summary())

    def rollout(self) -> Rollout:
        """Generate and score until the step has its groups (see the module docstring)."""
        target = self.prompts_per_step
        max_rounds = max(1, int(getattr(self.algo, "max_generation_rounds", 1)))
        counts: dict[str, Any] = {"summaries": []}
        generated: list[Completion] = []
        kept: list[Completion] = []
        kept_groups = filtered = rounds = 0
        gen_time = score_time = 0.0
        while kept_groups < target:
            if rounds >= max_rounds:
                break
            indices = self.sampler.take(target - kept_groups)
            t0 = time.perf_counter()
            items = self._generate(
                indices, first_group=rounds * target + kept_groups, round_=rounds
            )
            t1 = time.perf_counter()
            self._score(items, counts)
            t2 = time.perf_counter()
            gen_time, score_time = gen_time + t1 - t0, score_time + t2 - t1
            rounds += 1
            generated += items
            mask = self.algo.select(build_batch(items, self.labels, self.pad_id))
            if mask is None:
                kept += items
                kept_groups += len(indices)
                break
            keep = [bool(x) for x in mask.tolist()]
            groups_here = {c.group for c in items}
            for c, k in zip(items, keep, strict=True):
                c.kept = k
            now = [c for c in items if c.kept]
            kept_here = {c.group for c in now}
            kept += now
            kept_groups += len(kept_here)
            filtered += len(groups_here) - len(kept_here)
        if not kept:
            raise TrainingError(
                f"step {self.step}: dynamic sampling kept no group in {rounds} generation "
                f"round(s): every group's completions scored the same. Raise "
                "algorithm.params.max_generation_rounds, turn dynamic sampling off "
                "(algorithm.params.dynamic_sampling: false), or use rewards that tell "
                "completions apart"
            )
        if kept_groups < target:
            logger.warning(
                "step %d: only %d of %d groups kept after %d generation rounds (dynamic "
                "sampling); training on what there is. Raise "
                "algorithm.params.max_generation_rounds to fill steps",
                self.step,
                kept_groups,
                target,
                rounds,
            )
        return Rollout(
            kept=kept,
            generated=generated,
            rounds=rounds,
            groups_filtered=filtered,
            summary=merge_summaries(counts["summaries"]),
            generation_time=gen_time,
            scoring_time=score_time,
        )

    # ------------------------------------------------------------------ model passes

    def _temperature(self) -> float:
        return self.t.temperature if self.t.temperature > 0 else 1.0

    def _micro_batches(self, n: int) -> Iterator[torch.Tensor]:
        size = self.t.per_device_train_batch_size * self.t.num_generations
        for start in range(0, n, size):
            yield torch.arange(start, min(start + size, n), device=self.device)

    def _logprobs(
        self, model: torch.nn.Module, mb: RolloutBatch, *, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        with self._autocast():
            return self._completion_logprobs(
                model,
                mb.prompt_ids,
                mb.prompt_mask,
                mb.completion_ids,
                mb.completion_mask,
                temperature=self._temperature(),
                with_entropy=with_entropy,
            )

    def _values(self, mb: RolloutBatch) -> torch.Tensor:
        """The value model's values of the states before each completion token ``[n, T]``."""
        assert self.value_model is not None
        ids = torch.cat([mb.prompt_ids, mb.completion_ids], dim=1)
        mask = torch.cat([mb.prompt_mask, mb.completion_mask], dim=1)
        p, t = mb.prompt_ids.shape[1], mb.completion_ids.shape[1]
        with self._autocast():
            values = self.value_model(ids, mask)
        return values[:, p - 1 : p - 1 + t].float()

    @torch.no_grad()
    def _fill_no_grad(self, batch: RolloutBatch) -> RolloutBatch:
        """Old log-probs, reference log-probs and old values, as the algorithm requires."""
        need_old = self.areq.old_logprobs
        need_ref = self.reference is not None
        need_values = self.value_model is not None
        if not (need_old or need_ref or need_values):
            return batch
        width = batch.completion_ids.shape[1]
        old, ref, vals = [], [], []
        self.policy.eval()
        if self.value_model is not None:
            self.value_model.eval()
        for idx in self._micro_batches(len(batch)):
            mb = _trim(batch.index(idx))
            if need_old:
                old.append(_widen(self._logprobs(self.policy, mb)[0].float(), width))
            if need_ref:
                ref.append(_widen(self._logprobs(self.reference, mb)[0].float(), width))
            if need_values:
                vals.append(_widen(self._values(mb), width))
        return replace(
            batch,
            old_logp=torch.cat(old) if old else batch.old_logp,
            ref_logp=torch.cat(ref) if ref else batch.ref_logp,
            old_values=torch.cat(vals) if vals else batch.old_values,
        )

    # ------------------------------------------------------------------ update

    def _update(self, batch: RolloutBatch, first: bool) -> dict[str, Any]:
        """One optimizer update over all micro-batches of ``batch``."""
        mask = batch.loss_mask if batch.loss_mask is not None else batch.completion_mask
        num_tokens = int(mask.sum().item())
        num_seqs = int((mask.sum(dim=1) > 0).sum().item())
        self.policy.train()
        if self.value_model is not None:
            self.value_model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_total = 0.0
        finite = True
        algo_metrics: dict[str, list[tuple[float, float]]] = {}
        entropy: list[tuple[float, float]] = []
        kl: list[tuple[float, float]] = []
        gap_mean: list[tuple[float, float]] = []
        gap_max = 0.0
        for idx in self._micro_batches(len(batch)):
            mb = _trim(batch.index(idx))
            mb_mask = mb.loss_mask if mb.loss_mask is not None else mb.completion_mask
            weight = float(mb_mask.sum().item())
            logp, ent = self._logprobs(self.policy, mb, with_entropy=first)
            values = self._values(mb) if self.value_model is not None else None
            with self._autocast():
                out = self.algo.loss(
                    mb, logp, values=values, num_tokens=num_tokens, num_seqs=num_seqs
                )
            value = float(out.loss.detach().float().item())
            if not _finite(value):
                finite = False
                break
            out.loss.backward()
            loss_total += value
            for k, v in out.metrics.items():
                algo_metrics.setdefault(k, []).append((float(v), weight))
            cmask = mb.completion_mask.bool()
            n_tok = float(cmask.sum().item())
            if ent is not None:
                ent_mean = (ent.detach().float() * cmask).sum() / max(n_tok, 1.0)
                entropy.append((float(ent_mean.item()), n_tok))
            if first and mb.sampler_logp is not None:  # trainer vs sampler (e.g. vLLM)
                gap = logprob_gap_stats(logp.detach().float(), mb.sampler_logp, cmask)
                gap_mean.append((gap["mean"], n_tok))
                gap_max = max(gap_max, gap["max"])
            if mb.ref_logp is not None and "kl" not in out.metrics:
                k3 = kl_penalty(logp.detach().float(), mb.ref_logp, "k3")
                kl.append((float(masked_mean(k3, mb_mask).item()), weight))

        grad_norm = value_grad_norm = math.nan
        if finite:
            params = [p for p in self.policy.parameters() if p.grad is not None]
            grad_norm = (
                float(torch.nn.utils.clip_grad_norm_(params, self.t.max_grad_norm).item())
                if params
                else 0.0
            )
            if self.value_model is not None:
                vparams = [p for p in self.value_model.parameters() if p.grad is not None]
                value_grad_norm = (
                    float(torch.nn.utils.clip_grad_norm_(vparams, self.t.max_grad_norm).item())
                    if vparams
                    else 0.0
                )
                finite = _finite(value_grad_norm)
            finite = finite and _finite(grad_norm)
        if finite:
            self._updating = True  # from here on, an interrupt cannot roll the step back
            self.optimizer.step()
            self.scheduler.step()  # as in transformers' Trainer: not after a skipped update
        self.optimizer.zero_grad(set_to_none=True)
        out_metrics: dict[str, Any] = {
            "loss": loss_total if finite else math.nan,
            "grad_norm": grad_norm,
            "finite": finite,
            "algo": {k: _weighted_mean(v) for k, v in algo_metrics.items()},
        }
        if self.value_model is not None:
            out_metrics["value_grad_norm"] = value_grad_norm
        if entropy:
            out_metrics["entropy"] = _weighted_mean(entropy)
        if kl:
            out_metrics["kl"] = _weighted_mean(kl)
        if gap_mean:
            out_metrics["sampler/logp_gap_mean"] = _weighted_mean(gap_mean)
            out_metrics["sampler/logp_gap_max"] = gap_max
        return out_metrics

    # ------------------------------------------------------------------ one step

    def train_step(self) -> dict[str, Any]:
        self.step += 1
        start = time.perf_counter()
        _seed_everything(step_seed(self.t.seed, self.step, 1_000_000))
        ro = self.rollout()

        t0 = time.perf_counter()
        batch = build_batch(ro.kept, self.labels, self.pad_id).to(self.device)
        batch = self._fill_no_grad(batch)
        batch, prep_metrics = self.algo.prepare(batch)
        lr = self.optimizer.param_groups[0]["lr"]
        updates = [self._update(batch, first=i == 0) for i in range(self.updates_per_step)]
        finite = all(u["finite"] for u in updates)
        self.generator.sync_weights(self.policy)
        t1 = time.perf_counter()

        gen = ro.generated
        m: dict[str, Any] = {"step": self.step}
        m.update(reward_metrics(RewardStats.of([c.score for c in gen]), ro.summary))
        m["zero_std_frac"] = _zero_std_frac(gen)
        m["groups_filtered"] = ro.groups_filtered
        m["groups_kept"] = len({c.group for c in ro.kept})
        m["generation_rounds"] = ro.rounds
        m.update(length_metrics([len(c.token_ids) for c in gen], [c.truncated for c in gen]))
        m["loss"] = sum(u["loss"] for u in updates) / len(updates)
        m["grad_norm"] = sum(u["grad_norm"] for u in updates) / len(updates)
        if self.value_model is not None:
            m["value_grad_norm"] = sum(u["value_grad_norm"] for u in updates) / len(updates)
        for key in ("entropy", "sampler/logp_gap_mean", "sampler/logp_gap_max"):
            if key in updates[0]:  # measured before the first update of the step
                m[key] = updates[0][key]
        kls = [u["kl"] for u in updates if "kl" in u]
        if kls:
            m["kl"] = sum(kls) / len(kls)
        m["learning_rate"] = lr
        m["skipped"] = 0 if finite else 1
        m["num_tokens"] = int(batch.completion_mask.sum().item())
        extra: dict[str, list[float]] = {}
        for u in updates:
            for k, v in u["algo"].items():
                extra.setdefault(k, []).append(v)
        for source in (prep_metrics, {k: sum(v) / len(v) for k, v in extra.items()}):
            for k, v in source.items():
                if k in ("kl",) and "kl" not in m:
                    m["kl"] = float(v)
                elif k in m:
                    m[f"algo/{k}"] = float(v)
                else:
                    m[k] = float(v)
        step_time = time.perf_counter() - start
        m["step_time"] = step_time
        m["generation_time"] = ro.generation_time
        m["scoring_time"] = ro.scoring_time
        m["training_time"] = t1 - t0
        m["tokens_per_second"] = sum(len(c.token_ids) for c in gen) / max(step_time, 1e-9)
        m["peak_memory_mb"] = peak_memory_mb()

        if finite:
            self.bad_steps = 0
        else:
            self.bad_steps += 1
            logger.warning(
                "step %d: non-finite loss or gradient norm; update skipped (%d in a row, "
                "training.max_bad_steps=%d)",
                self.step,
                self.bad_steps,
                self.t.max_bad_steps,
            )
        self.log.log(m)
        self.last_metrics = m
        every = self.t.log_samples_steps
        if self.step % every == 0 or self.step == 1:
            self.log.log_samples(self.step, self._sample_records(ro, batch))
        return m

    def _sample_records(self, ro: Rollout, batch: RolloutBatch) -> list[dict[str, Any]]:
        advantages = {}
        if batch.advantages is not None and batch.advantages.dim() == 1:
            advantages = {
                id(c): float(a) for c, a in zip(ro.kept, batch.advantages.tolist(), strict=True)
            }
        prompt_field = self.config.data.prompt_field
        out = []
        for c in ro.generated:
            row = self.prompts[c.prompt_index].row
            record = {
                "group": c.group,
                "prompt": self.prompts[c.prompt_index].text,
                "completion": c.text,
                "reward": c.score,
                "rewards": c.rewards,
                "num_tokens": len(c.token_ids),
                "truncated": c.truncated,
                "kept": c.kept,
                "row": {k: v for k, v in row.items() if k != prompt_field},
            }
            if id(c) in advantages:
                record["advantage"] = advantages[id(c)]
            out.append(record)
        return out

    # ------------------------------------------------------------------ saving

    def save(self) -> Path:
        with _saved_as_for_inference(self.policy):
            return self._save()

    def _save(self) -> Path:
        path = ckpt.save_checkpoint(
            self.output_dir,
            self.step,
            model=self.policy,
            tokenizer=self.tokenizer,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            value_model=self.value_model,
            save_total_limit=self.t.save_total_limit,
            state={
                "data": self.sampler.state_dict(),
                "bad_steps": self.bad_steps,
                "max_steps": self.max_steps,
                "seed": self.t.seed,
                "metrics": self.last_metrics,
            },
            extra_files={"rlvr_config.yaml": self.config_text},
        )
        self._last_saved = self.step
        return path

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict[str, Any]:
        try:
            self.setup()
            with _StopFlag() as stop:
                while self.step < self.max_steps:
                    self._step_start = (self.step, self.sampler.position)
                    self._updating = False
                    try:
                        self.train_step()
                    except BaseException:  # Ctrl-C, nothing to train on, out of memory...
                        self._save_after_interrupt()
                        raise
                    if self.bad_steps >= self.t.max_bad_steps:
                        path = self.save()
                        raise TrainingError(
                            f"{self.bad_steps} steps in a row had a non-finite loss or gradient "
                            f"norm (training.max_bad_steps={self.t.max_bad_steps}); stopped at "
                            f"step {self.step} and saved {path} (its weights are from the last "
                            "good update). Lower training.learning_rate, check the rewards for "
                            "huge values, or use training.max_grad_norm"
                        )
                    if self.step % self.t.save_steps == 0:
                        self.save()
                    if stop.requested:
                        if self._last_saved != self.step:
                            self.save()
                        self.log.write(
                            f"stopped at step {self.step}; continue with --resume "
                            f"(checkpoint in {self.output_dir})"
                        )
                        return self.last_metrics
                if self._last_saved != self.step:
                    self.save()
            return self.last_metrics
        finally:
            self.close()

    def _save_after_interrupt(self) -> None:
        """A step that did not finish (Ctrl-C, an error): before any weight changed, forget
        the step (its prompts are handed out again on resume) and save; during the update the
        state is half-way, so the last checkpoint stays the one to resume from."""
        if self._updating:
            logger.warning(
                "step %d stopped during its update: no checkpoint saved; --resume continues "
                "from the last one (step %s)",
                self.step,
                self._last_saved,
            )
            return
        self.step, self.sampler.position = self._step_start
        if self.step > 0 and self._last_saved != self.step:
            try:
                path = self.save()
            except Exception as exc:  # e.g. out of memory or disk: the original error matters
                logger.warning("could not save a checkpoint at step %d: %s", self.step, exc)
                return
            self.log.write(f"stopped; saved {path}; continue with --resume")

    def close(self) -> None:
        while self._closers:
            thing = self._closers.pop()
            try:
                thing.close()
            except Exception as exc:  # closing must not hide the real error
                logger.warning("closing %s failed: %s", type(thing).__name__, exc)


@contextlib.contextmanager
def _saved_as_for_inference(model: Any) -> Iterator[None]:
    """Gradient checkpointing turns ``config.use_cache`` off; a saved checkpoint should still
    generate with the KV cache when loaded for inference."""
    config = getattr(model, "config", None)
    before = getattr(config, "use_cache", None)
    if before is False:
        config.use_cache = True
    try:
        yield
    finally:
        if before is False:
            config.use_cache = before


def _zero_std_frac(items: Sequence[Completion]) -> float:
    groups: dict[int, list[float]] = {}
    for c in items:
        groups.setdefault(c.group, []).append(c.score)
    if not groups:
        return 0.0
    flat = sum(1 for scores in groups.values() if max(scores) - min(scores) == 0)
    return flat / len(groups)


def train(config: Any, host: Any, *, resume: bool = False, progress: bool = True) -> dict:
    """Train the policy ``config`` describes; return the last step's metrics.

    ``config`` is a validated run config (``rlvr.config.load_config`` with the model, data,
    rewards, algorithm and backend sections). ``resume`` continues from the latest complete
    checkpoint in ``training.output_dir``. Ctrl-C (or SIGTERM) finishes the current step, saves
    a checkpoint and returns; a second Ctrl-C aborts without saving.
    """
    start = time.perf_counter()
    trainer = Trainer(config, host, resume=resume, progress=progress)
    metrics = trainer.run()
    print(run_summary(trainer.output_dir, trainer.labels, time.perf_counter() - start), flush=True)
    return metrics


__all__ = ["Completion", "Rollout", "Trainer", "TrainingError", "build_batch", "step_seed", "train"]
