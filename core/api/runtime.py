"""The runtime interfaces the trainer drives: what an algorithm and a backend factory return.

The trainer, ``rlvr eval`` and the conformance kit (:mod:`rlvr.testing`) know plugins only
through these and the records of :mod:`rlvr.api.registration`. Data flows one way:
backend.generate -> rewards -> algorithm.select -> algorithm.prepare -> algorithm.loss.
:func:`missing_members` names what a built object lacks, so a plugin that does not implement
its interface fails when it is built, before the first step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

#: The largest magnitude a reward value (and a reward entry's weight or fallback) may have.
#: Rewards are scores of about -1..1 (or a few units); a value past this is a bug (a reward
#: returning 1e308), and its square would overflow the float32 statistics of the advantages.
REWARD_LIMIT = 1e6


@dataclass(frozen=True)
class TrainerState:
    """Where training stands, as a reward sees it (``Sample.state``): the fields of
    transformers' ``TrainerState`` that TRL reward functions read (``trainer_state=``).

    ``global_step`` counts the steps already done (0 while the first step's completions are
    scored, as in TRL); ``epoch`` is the passes over the prompts so far (a float); ``max_steps``
    the run's step count (0 outside training: ``rlvr eval``, ``rlvr rewards score``). Both count
    rlvr's steps (``training.max_steps``'s unit: one generation round each, whatever
    ``num_iterations``), so ``global_step / max_steps`` is the share of the run done, as in TRL;
    TRL's own counts are optimizer updates, ``num_iterations`` of them a step.
    """

    global_step: int = 0
    epoch: float = 0.0
    max_steps: int = 0


@dataclass
class BatchOutput:
    """What a batched reward (``Reward(batched=True)``) may return instead of a plain list of
    values: the values, one float or None per sample in order, with what it logged.

    ``columns[name]`` is one value per sample (TRL's ``log_extra``: they go into
    ``samples.jsonl`` under ``extra``); ``metrics[name]`` the scalars it logged for this batch
    (TRL's ``log_metric``: averaged per step into the metric ``reward/<label>/<name>``).
    """

    values: list[Any]
    columns: dict[str, list[Any]] = field(default_factory=dict)
    metrics: dict[str, list[float]] = field(default_factory=dict)


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
    #: return the sampled tokens' log-probabilities even from a backend that does not declare
    #: ``Capabilities.sampler_logprobs`` (``hf`` computes them on request only: they cost a
    #: log-softmax per token). Multi-turn episodes ask for them, to keep the sampler's values.
    logprobs: bool = False

    @classmethod
    def from_training(
        cls, training: Any, seed: int | None, *, logprobs: bool = False
    ) -> SamplingParams:
        """The sampling settings of a ``training`` config section, with this call's seed."""
        return cls(
            max_tokens=training.max_completion_length,
            temperature=training.temperature,
            top_p=training.top_p,
            top_k=training.top_k or 0,
            min_p=training.min_p or 0.0,
            repetition_penalty=training.repetition_penalty,
            seed=seed,
            logprobs=logprobs,
        )


def check_sampling_request(prompts: list[list[int]], n: int, sampling: SamplingParams) -> None:
    """The argument checks every backend's ``generate`` makes first (shared, not repeated)."""
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    if sampling.max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 (got {sampling.max_tokens})")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")


# --------------------------------------------------------------------------- environments

#: A chat message as chat templates take it: ``{"role": ..., "content": ...}``, plus
#: ``tool_calls`` on an assistant message and ``name``/``tool_call_id`` on a tool result.
Message = dict[str, Any]


@dataclass
class EpisodeStart:
    """What an environment's ``start`` returns for one dataset row.

    ``messages`` are the conversation the model answers first (rendered with the chat
    template, ``tools`` passed to it as ``tools=``: JSON schemas of the functions the model may
    call). ``state`` is the environment's own per-episode value, handed back to ``respond`` and
    ``close``: episodes of a group run concurrently, so an environment keeps nothing of an
    episode on itself.
    """

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    state: Any = None


@dataclass
class EnvResponse:
    """What an environment's ``respond`` returns after one assistant message.

    ``messages`` (user feedback, tool results) are appended to the conversation as tokens the
    model did not sample (loss mask 0). ``done`` ends the episode (its messages, if any, are
    still recorded in the transcript but not tokenized: nothing samples after them).
    ``rewards`` are named values added to the episode's score, each times its weight in
    ``environment.reward_weights`` (1 when not listed) and logged as ``rewards/<name>`` like a
    configured reward (see the environments concept page); the last value given for a name
    counts.
    """

    messages: list[Message] = field(default_factory=list)
    done: bool = False
    rewards: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class EnvironmentImpl(Protocol):
    """What an environment factory ``factory(params, run)`` returns: the episode protocol.

    Message-level, not token-level: rlvr owns the tokens (renders with the chat template,
    samples, appends the environment's messages as tokens), so an environment never sees
    token ids and cannot make the trained tokens differ from the sampled ones. Async, so the
    episodes of a group (and their tool calls) run concurrently on one event loop; a method
    that blocks should hand its work to a thread (``asyncio.to_thread``). A method that
    raises, or runs past the environment entry's ``turn_timeout``/``episode_timeout``, fails
    that episode only.
    """

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        """Begin an episode for dataset ``row``; ``prompt`` is the conversation the data
        config builds for it (system prompt + the prompt field), which most environments
        return as their ``messages``."""
        ...

    async def respond(self, state: Any, message: Message) -> EnvResponse:
        """Answer the model's assistant ``message`` (``content``: its decoded text; parsed
        ``tool_calls`` when the model called tools, each ``{"type": "function", "function":
        {"name", "arguments"}}``, or with an ``"error"`` key when the call was malformed)."""
        ...

    async def close(self, state: Any) -> None:
        """Release what the episode holds (always called once ``start`` succeeded)."""
        ...

    # Optional, so not a member of the protocol (a class without it is complete):
    #
    # async def group_rewards(
    #     self, states: list[Any], transcripts: list[list[Message]]
    # ) -> list[dict[str, float]]
    #
    # The group-level hook: called once per prompt after all its episodes ended (before
    # ``close``), with the states and conversations of those that did not fail, in order; it
    # returns one dict of named rewards per episode, merged into that episode's rewards (a
    # group's rank, a pairwise judge). A raise, a wrong number of dicts or a call past
    # ``turn_timeout`` fails the episodes of that group. See :data:`GROUP_REWARDS`.


#: The name of an environment's optional group-level reward hook (see :class:`EnvironmentImpl`).
GROUP_REWARDS = "group_rewards"


@runtime_checkable
class Generator(Protocol):
    """What a backend factory ``factory(params, run, model, tokenizer)`` returns.

    Optional: ``take_metrics() -> dict[str, float]``, the generator's own metrics since the
    last call (e.g. vLLM's ``prefix_cache/hit_frac``, its servers' ``server/queue_time``),
    logged with the step whose rollout it sampled; keys of seconds end in ``_time``."""

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
    ``loss_mask`` and, for value-based algorithms, ``returns``. ``step`` is the training step
    the batch was generated for (1-based; 0 outside training), for algorithms with schedules.
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
    #: multi-turn episodes: ``[N, T]``, 1 on the tokens the model sampled and 0 on those an
    #: environment added (and on padding); None: every completion token was sampled. The
    #: environment's tokens are attended to (``completion_mask``) but never trained on: the
    #: trainer multiplies it into ``loss_mask`` after ``prepare``, whatever the algorithm.
    action_mask: torch.Tensor | None = None
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None
    step: int = 0
    #: ``[N, P + T, H]``: what enters the first decoder layer training changes (LoRA on the top
    #: layers only), computed once by the trainer's no-grad pass so later passes skip the
    #: frozen layers below it (:func:`rlvr.model.logprobs.shared_layers`). Algorithms ignore it.
    frozen_hidden: torch.Tensor | None = None
    #: ``[N]`` bool: False where every reward returned None (TRL's unscorable completion):
    #: the group-relative advantages leave it out of its group's baseline and give it 0.
    #: None: every row is scored.
    scored: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.completion_ids.shape[0])

    def index(self, idx: torch.Tensor) -> RolloutBatch:
        """The rows ``idx`` (an index or boolean tensor) of every per-sample tensor."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or isinstance(value, int):
                out[f.name] = value
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
            elif value is None or isinstance(value, int):
                out[f.name] = value
            else:
                out[f.name] = value.to(device)
        return RolloutBatch(**out)


@dataclass
class LossOutput:
    """A micro-batch's loss (already normalised for gradient accumulation) and its metrics."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class AlgorithmImpl(Protocol):
    """What an algorithm factory ``factory(params, run)`` returns (``run``: a :class:`RunInfo`).

    What the algorithm needs from the run (reference model, value model, old log-probs...) is
    the record's ``requirements(params)`` (:class:`rlvr.api.registration.Requirements`), the one
    source
    both ``rlvr validate`` and the trainer read. The built-in algorithms share
    :class:`rlvr.algorithms.base.PolicyGradient`, which sets every attribute below.
    """

    #: optimizer passes over each generated batch (TRL's ``num_iterations``), >= 1.
    num_iterations: int
    #: generation rounds allowed to fill a step when ``select`` filters groups out, >= 1.
    max_generation_rounds: int
    #: the value model's learning rate; None: ``training.learning_rate``. Read only when
    #: ``requirements.value_model`` is set.
    value_learning_rate: float | None

    def select(self, batch: RolloutBatch) -> torch.Tensor | None:
        """Boolean ``[N]`` of samples to keep (dynamic sampling), or None to keep all."""
        ...

    def inert(self, batch: RolloutBatch) -> torch.Tensor | None:
        """Boolean ``[N]``: rows of a prepared batch whose loss has no gradient (a GRPO group
        whose completions all scored the same, with no KL or value term), so the update may
        skip their forward and backward passes; the step's ``num_tokens``/``num_seqs`` still
        count them. None: skip nothing (what an algorithm without this method gets)."""
        ...

    def prepare(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """Shape rewards, set ``advantages``/``loss_mask`` (and ``returns``); pure, no grad.

        The metrics are logged as ``algo/<algorithm name>/<key>``.
        """
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
        """Only called when ``requirements.value_model``: a module mapping
        ``(input_ids, attention_mask)`` to per-position values ``[N, L]``."""
        ...


@dataclass(frozen=True)
class RunInfo:
    """Facts about the run that plugin factories may need (no models in here).

    Built by :meth:`from_config` for training and ``rlvr eval`` alike; tests build small ones
    directly. ``max_steps`` is 0 and ``evaluation`` True under ``rlvr eval``.
    """

    max_completion_length: int
    num_generations: int
    seed: int = 0
    max_prompt_length: int | None = None
    temperature: float = 1.0
    max_steps: int = 0
    learning_rate: float = 0.0
    device: str = "cpu"
    #: the dtype the model computes in (``model.dtype`` resolved). Trained weights are float32
    #: whatever it is, so a backend generates in this dtype, not in its model's weights' one.
    dtype: str = "float32"
    output_dir: str = ""
    evaluation: bool = False
    #: multi-turn episodes: the most completion tokens of one episode, sampled and the
    #: environment's together (the environment entry's budget); None: single completions. A
    #: backend sizes its context by it (``vllm``'s ``max_model_len``).
    max_episode_tokens: int | None = None

    @classmethod
    def from_config(
        cls,
        config: Any,
        *,
        num_generations: int | None = None,
        max_steps: int = 0,
        device: Any = "cpu",
        dtype: Any = "float32",
        evaluation: bool = False,
        multi_turn: bool = False,
    ) -> RunInfo:
        """The run facts of a validated config (``num_generations`` overrides the training
        section's, as ``rlvr eval -k`` does; ``multi_turn``: its environment has turns,
        :func:`rlvr.config.schema.multi_turn`, which needs the plugin host)."""
        t = config.training
        env = config.environment
        budget = None
        if multi_turn and env is not None:
            budget = env.max_episode_tokens or env.max_turns * t.max_completion_length
        return cls(
            max_completion_length=t.max_completion_length,
            num_generations=t.num_generations if num_generations is None else num_generations,
            seed=t.seed,
            max_prompt_length=t.max_prompt_length,
            temperature=t.temperature,
            max_steps=max_steps,
            learning_rate=t.learning_rate,
            device=str(device),
            dtype=str(dtype).removeprefix("torch."),
            output_dir=str(t.output_dir),
            evaluation=evaluation,
            max_episode_tokens=budget,
        )


# --------------------------------------------------------------------------- callbacks


@dataclass
class RunControl:
    """What a callback may ask of the run it observes: :meth:`stop` ends it after the current
    step, saved as any stop is (``stop_reason`` says who asked and why)."""

    stop_reason: str | None = None

    def stop(self, reason: str) -> None:
        """End the run after this step (saved, resumable); ``reason`` is printed."""
        if self.stop_reason is None:
            self.stop_reason = reason


class RunCallback(Protocol):
    """The methods a callback object may have, every one optional. rlvr passes each only
    the keyword arguments its signature names (``def on_step_end(self, step, metrics)`` is
    fine). They run on rank 0, in the order the config names the callbacks.

    - ``on_run_start(run, output_dir, config, start_step)``: before the first step
      (``start_step`` > 0 on ``--resume``; ``config`` is the resolved config as a dict).
    - ``on_step_end(step, metrics, scalars, control)``: after each training step, with the
      step's metrics (a ``metrics.jsonl`` line; ``scalars``: its numbers alone).
    - ``on_log(step, metrics, scalars, control)``: every line written to ``metrics.jsonl``
      (the baseline eval of step 0 included): where a logger writes.
    - ``on_evaluate(step, metrics, scalars, control)``: after an in-training eval
      (``eval/...`` keys).
    - ``on_save(step, checkpoint, control)``: after a checkpoint is complete.
    - ``on_run_end(step, summary, status)``: once, last; ``status`` is ``"finished"``,
      ``"stopped"`` (a stop request, the time budget, a callback) or ``"failed"``; ``summary``
      is ``run_summary.json``'s content (empty when the run failed before it).

    ``control`` is the run's :class:`RunControl`. A method that raises is reported once and
    not called again; the run goes on (``metrics.jsonl`` stays the record)."""

    def on_run_start(
        self, *, run: RunInfo, output_dir: Any, config: dict[str, Any], start_step: int
    ) -> None: ...


def missing_members(obj: object, protocol: type, *, skip: tuple[str, ...] = ()) -> list[str]:
    """The attributes and methods of ``protocol`` that ``obj`` lacks (methods must be callable),
    leaving out ``skip``. Used right after a factory builds a plugin object, so that the error
    names what is missing instead of a crash mid-run."""
    annotations = getattr(protocol, "__annotations__", {})
    names = [n for n in dir(protocol) if not n.startswith("_")] + list(annotations)
    missing = []
    for name in dict.fromkeys(names):
        if name in skip:
            continue
        if not hasattr(obj, name):
            missing.append(name)
        elif name not in annotations and not callable(getattr(obj, name)):
            missing.append(f"{name}()")
    return missing
