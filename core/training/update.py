"""The update: the model passes and optimizer steps of a training step.

:class:`PolicyUpdate` owns the policy, the reference and value models (when the algorithm's
requirements ask for them), the optimizer and the learning-rate schedule. Per step:

1. :meth:`~PolicyUpdate.fill_no_grad`: old log-probs, reference log-probs and old values, each
   only when required, under ``no_grad``;
2. the trainer calls ``algorithm.prepare``;
3. ``num_iterations`` times :meth:`~PolicyUpdate.update`: one optimizer update over micro-batches
   of ``per_device_train_batch_size * num_generations`` completions, the loss normalised by the
   whole step's token/sequence counts (so accumulation equals one big batch). A non-finite
   loss or gradient norm skips the update; an update that makes the trained weights
   non-finite, or changes their norm more than :data:`MAX_NORM_CHANGE` fold, raises
   :class:`WeightsError` (the weights are then lost: the run stops without saving them).

Under data parallelism (:mod:`rlvr.parallel.distributed`) the counts the loss is normalised by are
summed over ranks, each rank backpropagates its own micro-batches without communication, and
one all-reduce sums the gradients before clipping: the update equals one process holding the
whole step's batch, whatever each rank's number of micro-batches.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from transformers import get_scheduler

from rlvr.api.errors import TrainingError
from rlvr.api.runtime import AlgorithmImpl, RolloutBatch
from rlvr.config.schema import TrainingConfig
from rlvr.functional import kl_penalty, logprob_gap_stats, masked_mean
from rlvr.model.loading import autocast
from rlvr.model.logprobs import completion_logprobs, packs_prompts, prefix_hidden, shared_layers
from rlvr.model.lora import adapters_off, forward_model
from rlvr.parallel.distributed import Dist, fsdp_modules
from rlvr.training.micro_batches import in_order, trim, weighted_mean, widen
from rlvr.training.phase_clock import PhaseClock

#: An update that multiplies (or divides) the trained weights' norm by more than this is taken
#: for an explosion. A sane update moves the weights by a small fraction of their norm (Adam at
#: lr 1e-3 on weights of about 0.02: well under 1%); one past 10x is a broken learning rate or
#: gradient, whatever the model.
MAX_NORM_CHANGE = 10.0


class WeightsError(TrainingError):
    """An optimizer step made the trained weights non-finite or blew their norm up."""


@dataclass
class UpdateResult:
    """What one optimizer update measured (see :func:`rlvr.training.step_metrics.step_metrics`)."""

    loss: float
    grad_norm: float
    finite: bool
    #: the algorithm's ``loss`` metrics, averaged over micro-batches by their token counts.
    algo: dict[str, float] = field(default_factory=dict)
    value_grad_norm: float | None = None
    #: only measured on the step's first update (before any weight changed).
    entropy: float | None = None
    sampler_gap_mean: float | None = None
    sampler_gap_max: float | None = None
    #: k3 KL to the reference model, when there is one.
    kl: float | None = None
    #: the share of rows whose passes were skipped: their loss has no gradient
    #: (:meth:`rlvr.api.runtime.AlgorithmImpl.inert`, e.g. GRPO groups of equal scores).
    inert_frac: float = 0.0


class PolicyUpdate:
    """The models, optimizer and schedule of a run, and the passes that update them."""

    def __init__(
        self,
        *,
        policy: torch.nn.Module,
        reference: torch.nn.Module | None,
        reference_is_base: bool = False,
        value_model: torch.nn.Module | None,
        algorithm: AlgorithmImpl,
        old_logprobs: bool,
        training: TrainingConfig,
        device: torch.device,
        dtype: torch.dtype,
        total_updates: int,
        updates_per_step: int = 1,
        dist: Dist | None = None,
    ) -> None:
        self._autocast_to = autocast
        self._completion_logprobs = completion_logprobs
        self._prefix_hidden = prefix_hidden
        self.policy = policy
        self.reference = reference
        #: LoRA: the reference is the policy with its adapters off
        #: (:func:`rlvr.model.lora.adapters_off`).
        self.reference_is_base = reference_is_base
        #: what the passes call: a peft policy's base model, which carries the adapters.
        self._forward = forward_model(policy)
        #: LoRA on the top layers only: the bottom ``shared`` layers run once per batch, in
        #: the no-grad pass (when there is one), for every pass (``RolloutBatch.frozen_hidden``).
        self.shared = (
            shared_layers(self._forward)
            if reference is None and (reference_is_base or old_logprobs)
            else 0
        )
        #: the passes pack a group's completions behind one prompt (``training.pack_prompts``,
        #: where the model allows it): micro-batches hold whole groups.
        self.packs = training.pack_prompts and packs_prompts(self._forward)
        #: ``training.profile_phases``: CPU seconds per phase (the trainer times its own too).
        self.clock = PhaseClock(training.profile_phases)
        self.value_model = value_model
        self.algorithm = algorithm
        self.old_logprobs = old_logprobs
        self.t = training
        self.device = device
        self.dtype = dtype
        self.dist = dist or Dist()
        #: FSDP2: every forward and backward of the policy is a collective, so every rank runs
        #: the same number of them (dummy 1-token passes fill in), and the backward averages
        #: gradients over ranks, which the loss scale turns back into the sum.
        self.sharded = bool(fsdp_modules(policy))
        self._grad_scale = float(self.dist.world_size) if self.sharded else 1.0
        for model in (policy, value_model):
            if model is not None:  # replicas start equal
                self.dist.broadcast_module(model)
        self.optimizer = self._build_optimizer()
        #: the optimizer updates of one step (the algorithm's ``num_iterations``): the schedule
        #: counts updates, ``training.warmup_steps`` steps.
        self.updates_per_step = updates_per_step
        self.scheduler = self._build_scheduler(total_updates)
        #: set just before the optimizer changes weights (an interrupt can no longer undo it).
        self.stepped = False
        #: the trained weights' norm after the last update (:meth:`_check_weights`).
        self._norm = self.weights_norm()
        self._last_grad_norm = math.nan

    # ------------------------------------------------------------------ building

    def _build_optimizer(self) -> torch.optim.Optimizer:
        t = self.t
        decay: list[torch.nn.Parameter] = []
        no_decay: list[torch.nn.Parameter] = []
        for p in self.policy.parameters():
            if p.requires_grad:
                (decay if p.dim() >= 2 else no_decay).append(p)
        groups: list[dict[str, Any]] = [
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
            value_lr = self.algorithm.value_learning_rate or t.learning_rate
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

    def _build_scheduler(self, total: int) -> Any:
        """The learning-rate schedule over ``total`` optimizer updates (``max_steps x
        num_iterations``), advanced after each update: ``warmup_steps`` counts steps as
        ``max_steps`` does, so the warm-up is ``warmup_steps x num_iterations`` updates and
        ends with the step ``warmup_steps``, the schedule with the step ``max_steps``, whatever
        ``num_iterations`` is (``warmup_ratio``: that share of the updates)."""
        t = self.t
        warmup = t.warmup_steps * self.updates_per_step or math.ceil(t.warmup_ratio * total)
        kwargs = {"min_lr_rate": 0.1} if t.lr_scheduler_type == "cosine_with_min_lr" else None
        return get_scheduler(
            t.lr_scheduler_type,
            self.optimizer,
            num_warmup_steps=warmup,
            num_training_steps=total,
            scheduler_specific_kwargs=kwargs,
        )

    # ------------------------------------------------------------------ model passes

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The passes compute in the run's dtype; the trained weights stay float32."""
        return self._autocast_to(self.device, self.dtype)

    def _micro_batches(self, batch: RolloutBatch) -> Iterator[torch.Tensor]:
        """Row indices of each micro-batch. With several micro-batches the rows go longest
        first (prompt + completion tokens), so rows of similar length share a micro-batch and
        :func:`trim` cuts most of their padding; where the passes pack a group's completions
        behind one prompt (:func:`rlvr.model.logprobs.packs_prompts`), whole groups go longest first
        instead, so a group's rows share a micro-batch. The order changes no result: every loss
        is a sum over rows normalised by the whole step's counts (docs/algorithms.md)."""
        n = len(batch)
        size = self.t.per_device_train_batch_size * self.t.num_generations
        if n == 0:  # every row inert
            return
        if n <= size:
            yield torch.arange(n, device=self.device)
            return
        lengths = (batch.prompt_mask.sum(1) + batch.completion_mask.sum(1)).tolist()
        if not self.packs:
            order = sorted(range(n), key=lambda i: -lengths[i])
            for start in range(0, n, size):
                yield torch.tensor(order[start : start + size], device=self.device)
            return
        groups: dict[int, list[int]] = {}
        for i, g in enumerate(batch.group_ids.tolist()):
            groups.setdefault(g, []).append(i)
        batches: list[list[int]] = []  # each group into the first with room (groups cut by
        for group in sorted(groups.values(), key=lambda g: -max(lengths[i] for i in g)):
            fits = (b for b in batches if len(b) + len(group) <= size)  # `inert` leave room)
            target = next(fits, None)
            if target is None:
                batches.append(target := [])
            target.extend(group)
        for rows in batches:
            yield torch.tensor(rows, device=self.device)

    def _logprobs(
        self, model: torch.nn.Module, mb: RolloutBatch, *, with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs under ``model``; from ``mb.frozen_hidden`` up when it is there."""
        hidden = mb.frozen_hidden if model is self._forward else None
        with self._autocast():
            return self._completion_logprobs(
                model,
                mb.prompt_ids,
                mb.prompt_mask,
                mb.completion_ids,
                mb.completion_mask,
                temperature=self.t.temperature if self.t.temperature > 0 else 1.0,
                with_entropy=with_entropy,
                prefix=(self.shared, hidden) if hidden is not None else None,
                pack=self.packs,
            )

    def _frozen_hidden(self, mb: RolloutBatch) -> RolloutBatch:
        """``mb`` with what enters layer ``shared`` (the layers below run here, once)."""
        if not self.shared:
            return mb
        with self._autocast():
            hidden = self._prefix_hidden(
                self._forward,
                mb.prompt_ids,
                mb.prompt_mask,
                mb.completion_ids,
                mb.completion_mask,
                self.shared,
                pack=self.packs,
            )
        return replace(mb, frozen_hidden=hidden)

    def _reference_logprobs(self, mb: RolloutBatch) -> torch.Tensor:
        if self.reference is not None:
            return self._logprobs(self.reference, mb)[0]
        with adapters_off(self.policy):
            return self._logprobs(self._forward, mb)[0]

    def _values(self, value_model: torch.nn.Module, mb: RolloutBatch) -> torch.Tensor:
        """The value model's values of the states before each completion token ``[n, T]``."""
        ids = torch.cat([mb.prompt_ids, mb.completion_ids], dim=1)
        mask = torch.cat([mb.prompt_mask, mb.completion_mask], dim=1)
        p, t = mb.prompt_ids.shape[1], mb.completion_ids.shape[1]
        with self._autocast():
            values = value_model(ids, mask)
        return values[:, p - 1 : p - 1 + t].float()

    @torch.no_grad()
    def fill_no_grad(self, batch: RolloutBatch) -> RolloutBatch:
        """Old log-probs, reference log-probs and old values, as the algorithm requires."""
        value_model = self.value_model
        reference = self.reference is not None or self.reference_is_base
        if not (self.old_logprobs or reference or value_model is not None):
            return batch
        width, prompt_width = batch.completion_ids.shape[1], batch.prompt_ids.shape[1]
        old, ref, vals = [], [], []
        frozen: torch.Tensor | None = None  # [N, P + T, H], every row's shared-layer output
        self.policy.eval()
        if value_model is not None:
            value_model.eval()
        passes = 0
        target = self._collective_passes(len(batch)) if self.old_logprobs else 0
        rows = []
        for idx in self._micro_batches(batch):
            rows.append(idx)
            mb = self._frozen_hidden(trim(batch.index(idx)))
            passes += 1
            if mb.frozen_hidden is not None:
                h = mb.frozen_hidden
                if frozen is None:
                    frozen = h.new_zeros(len(batch), prompt_width + width, h.shape[-1])
                p = mb.prompt_ids.shape[1]
                frozen[idx.to(h.device), prompt_width - p : prompt_width + h.shape[1] - p] = h
            if self.old_logprobs:
                old.append(widen(self._logprobs(self._forward, mb)[0].float(), width))
            if reference:
                ref.append(widen(self._reference_logprobs(mb).float(), width))
            if value_model is not None:
                vals.append(widen(self._values(value_model, mb), width))
        for _ in range(target - passes):
            self._dummy_pass(backward=False)
        if not rows:  # dynamic sampling kept nothing (here): there is nothing to fill
            return batch
        order = torch.cat(rows)
        return replace(
            batch,
            old_logp=in_order(old, order) if old else batch.old_logp,
            ref_logp=in_order(ref, order) if ref else batch.ref_logp,
            old_values=in_order(vals, order) if vals else batch.old_values,
            frozen_hidden=frozen,
        )

    # ------------------------------------------------------------------ the update

    def _active(self, batch: RolloutBatch) -> RolloutBatch:
        """The rows of ``batch`` whose loss has a gradient (all, unless the algorithm's
        optional ``inert`` says some have none)."""
        inert = getattr(self.algorithm, "inert", None)
        skip = inert(batch) if inert is not None else None
        if skip is None or not bool(skip.any()):
            return batch
        return batch.index(torch.nonzero(~skip.to(self.device)).squeeze(1))

    def update(self, batch: RolloutBatch, first: bool) -> UpdateResult:
        """One optimizer update over all micro-batches of ``batch`` (after ``prepare``).

        The loss is normalised by the counts of the whole batch, but rows the algorithm calls
        inert (no gradient) get no pass: skipping them changes no weight."""
        mask = batch.loss_mask if batch.loss_mask is not None else batch.completion_mask
        counts = [float(mask.sum().item()), float((mask.sum(dim=1) > 0).sum().item())]
        num_tokens, num_seqs = (int(c) for c in self.dist.sum_numbers(counts))
        active = self._active(batch)
        value_model = self.value_model
        self.policy.train()
        if value_model is not None:
            value_model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_total = 0.0
        finite = True
        algo_metrics: dict[str, list[tuple[float, float]]] = {}
        entropy: list[tuple[float, float]] = []
        kl: list[tuple[float, float]] = []
        gap_mean: list[tuple[float, float]] = []
        gap_max = 0.0
        passes = 0
        target = self._collective_passes(len(active))
        for idx in self._micro_batches(active):
            mb = trim(active.index(idx))
            passes += 1
            mb_mask = mb.loss_mask if mb.loss_mask is not None else mb.completion_mask
            weight = float(mb_mask.sum().item())
            with self.clock("forward"):
                logp, ent = self._logprobs(self._forward, mb, with_entropy=first)
                values = self._values(value_model, mb) if value_model is not None else None
                with self._autocast():
                    out = self.algorithm.loss(
                        mb, logp, values=values, num_tokens=num_tokens, num_seqs=num_seqs
                    )
                value = float(out.loss.detach().float().item())
            if not math.isfinite(value):
                finite = False
                if not self.sharded:
                    break
                (logp.sum() * 0.0).backward()  # keeps the collective schedule (FSDP)
                continue
            with self.clock("backward"):
                (out.loss * self._grad_scale).backward()
            loss_total += value
            for k, v in out.metrics.items():
                algo_metrics.setdefault(k, []).append((float(v), weight))
            cmask = mb.completion_mask.bool()
            if mb.action_mask is not None:  # the policy's own tokens only
                cmask = cmask & mb.action_mask.bool()
            n_tok = float(cmask.sum().item())
            if ent is not None:
                ent_mean = (ent.detach().float() * cmask).sum() / max(n_tok, 1.0)
                entropy.append((float(ent_mean.item()), n_tok))
            if first and mb.sampler_logp is not None:  # trainer vs sampler (e.g. vLLM)
                gap = logprob_gap_stats(logp.detach().float(), mb.sampler_logp, cmask)
                gap_mean.append((gap["mean"], n_tok))
                gap_max = max(gap_max, gap["max"])
            if mb.ref_logp is not None:
                k3 = kl_penalty(logp.detach().float(), mb.ref_logp, "k3")
                kl.append((float(masked_mean(k3, mb_mask).item()), weight))

        for _ in range(target - passes):
            self._dummy_pass(backward=True)
        if passes == target == 0 and len(batch):
            # Every row was inert (on every rank, under FSDP): their backward would have left
            # zero gradients, which AdamW still steps on (moments decay, the step count grows),
            # so the same happens here.
            for p in self._trained_parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
        grad_norm = value_grad_norm = math.nan
        if self.dist.enabled:  # every rank reaches this, whatever its micro-batch count
            bad, loss_total = self.dist.sum_numbers([0.0 if finite else 1.0, loss_total])
            finite = bad == 0
            if finite:
                self.dist.sum_gradients(self._trained_parameters())
        with self.clock("optimizer"):
            if finite:
                grad_norm = self._last_grad_norm = self._clip(self.policy)
                if value_model is not None:
                    value_grad_norm = self._clip(value_model)
                    finite = math.isfinite(value_grad_norm)
                finite = finite and math.isfinite(grad_norm)
            if finite:
                self.stepped = True
                self.optimizer.step()
                self._check_weights()
                self.scheduler.step()  # as in transformers' Trainer: not after a skipped update
        self.optimizer.zero_grad(set_to_none=True)
        return UpdateResult(
            loss=loss_total if finite else math.nan,
            grad_norm=grad_norm,
            finite=finite,
            algo={k: weighted_mean(v) for k, v in algo_metrics.items()},
            value_grad_norm=value_grad_norm if value_model is not None else None,
            entropy=weighted_mean(entropy) if entropy else None,
            sampler_gap_mean=weighted_mean(gap_mean) if gap_mean else None,
            sampler_gap_max=gap_max if gap_mean else None,
            kl=weighted_mean(kl) if kl else None,
            inert_frac=1.0 - len(active) / len(batch) if len(batch) else 0.0,
        )

    def _collective_passes(self, n: int) -> int:
        """FSDP: the most micro-batches any rank has for ``n`` rows here (asked before the
        first pass, so the question itself never meets a forward pass on another rank)."""
        if not self.sharded:
            return 0
        size = self.t.per_device_train_batch_size * self.t.num_generations
        return self.dist.max_count(-(-n // size))

    def _dummy_pass(self, *, backward: bool) -> None:
        """A 1-token forward (and zero backward) of the policy: this rank's share of a
        collective pass other ranks make on real micro-batches."""
        one = torch.ones(1, 1, dtype=torch.long, device=self.device)
        with torch.set_grad_enabled(backward), self._autocast():
            logp, _ = self._completion_logprobs(self.policy, one, one, one, one)
        if backward:
            (logp.float().sum() * 0.0).backward()

    def _trained_parameters(self) -> list[torch.nn.Parameter]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def weights_norm(self) -> float:
        """The L2 norm of every trained weight: inf or nan when one is not finite (or their
        squares overflow). One fused pass over the weights, as gradient clipping makes over
        the gradients: 20-25 ms for 135M float32 weights on 2 CPU cores, 1.7 ms on an H100
        (a fused AdamW step there: 2.6 ms). Under FSDP a collective (every rank calls it)."""
        params = [p.detach() for p in self._trained_parameters()]
        if not params:
            return 0.0
        norm: Any = torch.nn.utils.get_total_norm(params)
        if hasattr(norm, "full_tensor"):  # sharded (FSDP) weights: a replicated DTensor
            norm = norm.full_tensor()
        return float(norm.item())

    def _check_weights(self) -> None:
        """Raise :class:`WeightsError` if the optimizer step just taken made the trained weights
        non-finite or changed their norm more than :data:`MAX_NORM_CHANGE` fold.

        The loss and the gradient norm were finite (else no step is taken), so this is an
        update out of scale: a learning rate far too large (``1e10``), or Adam's moments blown
        up. Undoing it would need a copy of the weights and the optimizer state from before
        the step, double their memory on every step; the run stops instead, and nothing
        saves these weights (the trainer checks again before any save)."""
        before, after = self._norm, self.weights_norm()
        change = after / before if before > 0 else 1.0
        if math.isfinite(after) and 1 / MAX_NORM_CHANGE <= change <= MAX_NORM_CHANGE:
            self._norm = after
            return
        lr = self.optimizer.param_groups[0]["lr"]
        what = (
            "made the trained weights non-finite"
            if not math.isfinite(after)
            else f"changed the trained weights' norm from {before:.4g} to {after:.4g}"
        )
        raise WeightsError(
            f"the update {what} (learning rate {lr:.3g}, gradient norm before clipping "
            f"{self._last_grad_norm:.3g}); the run stops without saving these weights. Lower "
            f"training.learning_rate (now {self.t.learning_rate:g}) or training.max_grad_norm "
            f"(now {self.t.max_grad_norm:g})"
        )

    def _clip(self, model: torch.nn.Module) -> float:
        """Clip ``model``'s gradients to ``max_grad_norm``; the norm before clipping."""
        params = [p for p in model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        norm: Any = torch.nn.utils.clip_grad_norm_(params, self.t.max_grad_norm)
        if hasattr(norm, "full_tensor"):  # sharded (FSDP) gradients: a replicated DTensor
            norm = norm.full_tensor()
        return float(norm.item())


__all__ = [
    "MAX_NORM_CHANGE",
    "PolicyUpdate",
    "UpdateResult",
    "WeightsError",
]
