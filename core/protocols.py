"""The runtime interfaces the trainer drives: what an algorithm and a backend factory return.

The trainer knows plugins only through these. Data flows one way:
backend.generate -> rewards -> algorithm.select -> algorithm.prepare -> algorithm.loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from rlvr.records import Requirements


@dataclass
class Generation:
    """What a backend returns for ``len(prompts) * n`` completions, grouped by prompt.

    Completion ``i`` belongs to prompt ``i // n``. ``token_ids`` exclude the prompt and any
    padding and include the end-of-sequence token when one was produced. ``truncated[i]`` is
    True when completion ``i`` hit ``max_tokens`` without an end-of-sequence token.
    ``logprobs`` (sampled tokens' log-probabilities under the sampler) only from backends that
    declare ``Capabilities.sampler_logprobs``.
    """

    token_ids: list[list[int]]
    texts: list[str]
    truncated: list[bool]
    logprobs: list[list[float]] | None = None


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings shared by every backend (from the ``training`` config section)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    @classmethod
    def from_training(cls, training: Any, seed: int | None) -> SamplingParams:
        """The sampling settings of a ``training`` config section, with this call's seed."""
        return cls(
            max_tokens=training.max_completion_length,
            temperature=training.temperature,
            top_p=training.top_p,
            top_k=training.top_k or 0,
            min_p=training.min_p or 0.0,
            repetition_penalty=training.repetition_penalty,
            seed=seed,
        )


def check_request(prompts: list[list[int]], n: int, sampling: SamplingParams) -> None:
    """The argument checks every backend's ``generate`` makes first (shared, not repeated)."""
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    if sampling.max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 (got {sampling.max_tokens})")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")


class Generator(Protocol):
    """What a backend factory ``factory(params, run)`` returns."""

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        """Sample ``n`` completions for each tokenized prompt."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the next ``generate`` use ``model``'s current weights (after an update)."""
        ...

    def close(self) -> None: ...


@dataclass
class RolloutBatch:
    """``N`` completions (groups of ``G`` per prompt) as tensors, after scoring.

    Token tensors are ``[N, T]``: completions right-padded, prompts ``[N, P]`` left-padded.
    ``completion_mask`` is 1 on real completion tokens. ``scores`` is the weighted reward sum;
    ``reward_components[label]`` holds each reward's values (NaN where it returned None).
    The trainer fills ``old_logp`` / ``ref_logp`` / ``old_values`` when the algorithm's
    requirements ask for them; ``prepare`` adds ``advantages`` (``[N]`` or ``[N, T]``),
    ``loss_mask`` and, for value-based algorithms, ``returns``.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    group_ids: torch.Tensor
    scores: torch.Tensor
    lengths: torch.Tensor
    truncated: torch.Tensor
    reward_components: dict[str, torch.Tensor] = field(default_factory=dict)
    sampler_logp: torch.Tensor | None = None
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.completion_ids.shape[0])

    def index(self, idx: torch.Tensor) -> RolloutBatch:
        """The rows ``idx`` (an index or boolean tensor) of every per-sample tensor."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                out[f.name] = None
            elif isinstance(value, dict):
                out[f.name] = {k: v[idx] for k, v in value.items()}
            else:
                out[f.name] = value[idx]
        return RolloutBatch(**out)

    def to(self, device: Any) -> RolloutBatch:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, dict):
                out[f.name] = {k: v.to(device) for k, v in value.items()}
            else:
                out[f.name] = None if value is None else value.to(device)
        return RolloutBatch(**out)


@dataclass
class LossOutput:
    """A micro-batch's loss (already normalised for gradient accumulation) and its metrics."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


class AlgorithmImpl(Protocol):
    """What an algorithm factory ``factory(params, run)`` returns.

    ``run`` is a :class:`RunInfo`. Optional extras (value models) are discovered through the
    requirements, never through isinstance checks.
    """

    requirements: Requirements
    #: optimizer passes over each generated batch (TRL's ``num_iterations``).
    num_iterations: int
    #: generation rounds allowed to fill a step when ``select`` filters groups out.
    max_generation_rounds: int

    def select(self, batch: RolloutBatch) -> torch.Tensor | None:
        """Boolean ``[N]`` of samples to keep (dynamic sampling), or None to keep all."""
        ...

    def prepare(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """Shape rewards, set ``advantages``/``loss_mask`` (and ``returns``); pure, no grad."""
        ...

    def loss(
        self,
        batch: RolloutBatch,
        logp: torch.Tensor,
        *,
        values: torch.Tensor | None = None,
        num_tokens: int,
        num_seqs: int,
    ) -> LossOutput:
        """Loss of one micro-batch given the current policy's ``logp`` ``[n, T]``.

        ``num_tokens``/``num_seqs`` count the valid tokens/sequences (by ``loss_mask``) of the
        whole optimizer step, so that micro-batch losses sum to the full-batch loss.
        """
        ...

    def build_value_model(self, policy: Any) -> Any:
        """Only when ``requirements.value_model``: a module mapping
        ``(input_ids, attention_mask)`` to per-position values ``[N, L]``."""
        ...


@dataclass(frozen=True)
class RunInfo:
    """Facts about the run that plugin factories may need (no models in here)."""

    max_completion_length: int
    num_generations: int
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
