"""``check_algorithm``: an algorithm plugin's ``select``, ``prepare`` and ``loss`` on a
synthetic batch (:func:`synthetic_batch`) of the run's first and last step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlvr.api.runtime import RolloutBatch, RunInfo
from rlvr.testing.conformance import (
    call,
    check_params_model,
    fail,
    finite_number,
    resolve,
    validated_params,
)

if TYPE_CHECKING:
    from rlvr.api.host import Host
    from rlvr.api.registration import Algorithm, Requirements


def synthetic_batch(
    requirements: Requirements,
    *,
    group_size: int = 4,
    num_groups: int = 3,
    max_completion_length: int = 8,
    vocab_size: int = 50,
    seed: int = 0,
) -> Any:
    """A scored :class:`~rlvr.api.runtime.RolloutBatch` as the trainer hands it to ``select``
    and ``prepare``: ``num_groups`` prompts x ``group_size`` completions of varied lengths
    (some truncated), scores that differ within all groups but the last, and only the
    log-probs/values that ``requirements`` ask for."""
    # loads torch: not when pytest loads rlvr.testing (see its __init__)
    import torch

    g = torch.Generator().manual_seed(seed)
    n, t = group_size * num_groups, max_completion_length
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[::3] = t
    truncated = torch.zeros(n, dtype=torch.bool)
    truncated[::6] = True
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    scores = torch.rand(n, generator=g).round(decimals=2)
    scores[-group_size:] = 1.0  # a group with no learning signal
    scores[0], scores[1] = 1.0, 0.0
    batch = RolloutBatch(
        prompt_ids=torch.randint(1, vocab_size, (n, 3), generator=g),
        prompt_mask=torch.ones(n, 3, dtype=torch.long),
        completion_ids=torch.randint(1, vocab_size, (n, t), generator=g) * mask,
        completion_mask=mask,
        group_ids=torch.arange(n) // group_size,
        scores=scores,
        lengths=lengths,
        truncated=truncated,
        reward_components={"check": scores.clone(), "check_format": (scores > 0.5).float()},
    )

    def logp() -> torch.Tensor:
        return -torch.rand(n, t, generator=g) * 3

    if requirements.old_logprobs:
        batch.old_logp = logp()
    if requirements.reference_model:
        batch.ref_logp = logp()
    if requirements.sampler_logprobs:
        batch.sampler_logp = logp()
    if requirements.value_model:
        batch.old_values = torch.randn(n, t, generator=g) * 0.3
    return batch


def check_algorithm(
    record_or_name: Algorithm | str,
    params: Mapping[str, Any] | Any | None = None,
    *,
    run: Any | None = None,
    host: Host | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Check an algorithm plugin on a synthetic batch; return the metrics it reported.

    Builds it with ``factory(params, run)`` (``run`` defaults to a small
    :class:`~rlvr.api.runtime.RunInfo`), then: the built object has every member of
    :class:`~rlvr.api.runtime.AlgorithmImpl` (``build_value_model`` when its requirements ask
    for a value model) as the trainer checks it; ``select`` returns None or a bool mask;
    ``prepare`` sets finite ``advantages`` (``[N]`` or ``[N, T]``) without needing tensors its
    requirements did not ask for; ``loss`` is a finite scalar with a finite gradient w.r.t.
    ``logp`` that is nonzero somewhere and zero on padding, and the losses of two
    micro-batches (given the whole step's ``num_tokens``/``num_seqs``) add up to the whole
    batch's. All of it on a batch of the run's first step and one of its last (``batch.step``
    1 and ``run.max_steps``; the default run has 1000 steps): a step may train only the value
    model (VAPO's value warm-up), but the last one must train the policy.
    """
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.api.host import algorithm_problems
    from rlvr.api.registration import Requirements

    record = resolve("algorithm", record_or_name, host)
    label = f"algorithm {record.name!r}"
    p = validated_params(label, record, params)
    check_params_model(label, p)
    req = call(label, "requirements(params)", record.requirements, p)
    if not isinstance(req, Requirements):
        raise fail(label, f"requirements(params) returned {req!r}, expected Requirements")
    if not isinstance(req.min_group_size, int) or req.min_group_size < 1:
        raise fail(label, f"requirements.min_group_size must be an int >= 1, got {req!r}")
    group = max(4, req.min_group_size)
    if run is None:
        run = RunInfo(max_completion_length=8, num_generations=group, seed=seed, max_steps=1000)
    impl = call(label, "factory(params, run)", record.factory, p, run)
    problems = algorithm_problems(impl, req)
    if problems:
        raise fail(
            label,
            f"the built object {type(impl).__name__} lacks {', '.join(problems)} "
            "(see rlvr.api.runtime.AlgorithmImpl)",
        )

    # The first and the last training step of the run: an algorithm with a schedule (VAPO's
    # value warm-up reads ``batch.step``) may train only its value model at the first, but must
    # train the policy by the last.
    steps = sorted({1, max(1, int(run.max_steps))})
    trains_policy = {}
    for step in steps:
        metrics, trains_policy[step] = _check_algorithm_step(label, impl, req, run, seed, step)
    if not any(trains_policy.values()):
        raise fail(
            label,
            f"the loss has no gradient w.r.t. logp (no policy gradient) at step "
            f"{' or '.join(map(str, steps))} (batch.step; run.max_steps = {run.max_steps}): "
            "only the value model trains. A value warm-up must end before the run does: "
            "check with a RunInfo whose max_steps is past it, or a shorter warm-up",
        )
    return metrics


def _check_algorithm_step(
    label: str, impl: Any, req: Any, run: Any, seed: int, step: int
) -> tuple[dict[str, float], bool]:
    """:func:`check_algorithm` on one synthetic batch of training step ``step``: its metrics,
    and whether the loss trains the policy (False: a value-only step, allowed only when the
    loss trains the values)."""
    # loads torch: not when pytest loads rlvr.testing (see its __init__)
    import torch

    batch = synthetic_batch(
        req, group_size=run.num_generations, max_completion_length=run.max_completion_length
    )
    batch.step = step
    n, t = batch.completion_ids.shape
    needs = (
        f"the batch holds only what its requirements ask for ({req!r}); does it read a tensor "
        "they do not declare?"
    )
    keep = call(label, f"select(batch) ({needs})", impl.select, batch)
    if keep is not None and not (
        isinstance(keep, torch.Tensor) and keep.dtype == torch.bool and keep.shape == (n,)
    ):
        raise fail(
            label, f"select() must return None or a bool tensor of shape [{n}], got {keep!r}"
        )

    out = call(label, f"prepare(batch) ({needs})", impl.prepare, batch)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], RolloutBatch)):
        raise fail(label, f"prepare() must return (RolloutBatch, metrics dict), got {out!r}")
    prepared, prep_metrics = out
    adv = prepared.advantages
    if not isinstance(adv, torch.Tensor) or tuple(adv.shape) not in ((n,), (n, t)):
        shape = tuple(adv.shape) if isinstance(adv, torch.Tensor) else adv
        raise fail(
            label, f"prepare() must set advantages of shape [{n}] or [{n}, {t}], got {shape}"
        )
    loss_mask = prepared.loss_mask if prepared.loss_mask is not None else batch.completion_mask
    if tuple(loss_mask.shape) != (n, t):
        raise fail(label, f"loss_mask must have shape [{n}, {t}], got {tuple(loss_mask.shape)}")
    valid = loss_mask.bool() if adv.dim() == 2 else loss_mask.bool().any(dim=1)
    if not torch.isfinite(adv[valid]).all():
        raise fail(label, f"prepare() set non-finite advantages: {adv}")
    if req.value_model and (prepared.returns is None or tuple(prepared.returns.shape) != (n, t)):
        raise fail(label, f"a value-model algorithm's prepare() must set returns [{n}, {t}]")
    metrics = _check_metrics(label, "prepare()", prep_metrics)

    g = torch.Generator().manual_seed(seed + 1)
    base = batch.old_logp if batch.old_logp is not None else -torch.rand(n, t, generator=g) * 3
    delta = (torch.randn(n, t, generator=g) * 0.3).requires_grad_()
    values = None
    if req.value_model:
        values = (torch.randn(n, t, generator=g) * 0.3).requires_grad_()
    num_tokens = int(loss_mask.bool().sum())
    num_seqs = int(loss_mask.bool().any(dim=1).sum())

    def loss_of(rows: torch.Tensor) -> Any:
        part = prepared.index(rows)
        logp = (base + delta)[rows]
        v = None if values is None else values[rows]
        result = call(
            label,
            f"loss() ({needs})",
            impl.loss,
            part,
            logp,
            values=v,
            num_tokens=num_tokens,
            num_seqs=num_seqs,
        )
        loss = getattr(result, "loss", None)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise fail(label, f"loss() must return a LossOutput with a scalar loss, got {result!r}")
        return result

    everything = torch.arange(n)
    result = loss_of(everything)
    loss = result.loss
    metrics.update(_check_metrics(label, "loss()", getattr(result, "metrics", {})))
    if not torch.isfinite(loss).all():
        raise fail(label, f"loss() returned a non-finite loss {loss}")
    if not loss.requires_grad:
        raise fail(label, "the loss does not depend on logp (it has no gradient)")
    loss.backward()
    grad = delta.grad
    if grad is not None and not torch.isfinite(grad).all():
        raise fail(label, f"the gradient of the loss w.r.t. logp is not finite: {grad}")
    trains_values = values is not None and values.grad is not None
    if values is not None and values.grad is not None and not torch.isfinite(values.grad).all():
        raise fail(label, "the gradient of the loss w.r.t. the values is not finite")
    trains_policy = grad is not None and bool(grad.abs().sum() > 0)
    if not trains_policy and not trains_values:
        raise fail(
            label,
            f"at step {step} the gradient of the loss w.r.t. logp is "
            f"{'absent' if grad is None else 'zero everywhere'} (no policy gradient)",
        )
    if req.value_model and not trains_values:
        raise fail(label, f"at step {step} the loss has no gradient w.r.t. the values")
    padding = ~batch.completion_mask.bool()
    if grad is not None and grad[padding].abs().max() > 0:
        raise fail(label, "padding positions (completion_mask == 0) get a gradient")
    _check_inert(label, impl, prepared, needs, [grad, None if values is None else values.grad])

    with torch.no_grad():
        half = n // 2
        first = loss_of(everything[:half]).loss
        second = loss_of(everything[half:]).loss
        whole = loss_of(everything).loss
    if not torch.allclose(first + second, whole, rtol=1e-4, atol=1e-6):
        raise fail(
            label,
            f"micro-batch losses do not add up: {float(first):.6g} + {float(second):.6g} != "
            f"{float(whole):.6g}; normalise by the num_tokens/num_seqs passed to loss() (the "
            "whole optimizer step's counts), not by the micro-batch's own",
        )
    return metrics, trains_policy


def _check_inert(label: str, impl: Any, prepared: Any, needs: str, grads: list[Any]) -> None:
    """The optional ``inert(batch)``: None or a bool ``[N]`` mask, and the rows it names have
    no gradient (the update skips their passes, so a wrong mask would change training)."""
    # loads torch: not when pytest loads rlvr.testing (see its __init__)
    import torch

    inert = getattr(impl, "inert", None)
    if inert is None:
        return
    n = len(prepared)
    skip = call(label, f"inert(batch) ({needs})", inert, prepared)
    if skip is None:
        return
    if not (isinstance(skip, torch.Tensor) and skip.dtype == torch.bool and skip.shape == (n,)):
        raise fail(label, f"inert() must return None or a bool tensor of shape [{n}], got {skip!r}")
    for name, grad in zip(("logp", "the values"), grads, strict=True):
        if grad is not None and bool(skip.any()) and grad[skip].abs().max() > 0:
            rows = torch.nonzero(skip).squeeze(1).tolist()
            raise fail(
                label,
                f"inert() names rows {rows}, but the loss has a gradient w.r.t. {name} there; "
                "the update skips inert rows, so return False (or None) for any row whose "
                "loss has a term besides a zero advantage",
            )


def _check_metrics(label: str, where: str, metrics: Any) -> dict[str, float]:
    if not isinstance(metrics, Mapping):
        raise fail(label, f"{where} must return metrics as a dict of str to float, got {metrics!r}")
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise fail(label, f"{where}: metric name {key!r} is not a string")
        if not finite_number(value):
            raise fail(label, f"{where}: metric {key!r} = {value!r} is not a finite number")
    return {k: float(v) for k, v in metrics.items()}
