"""The records plugins register, and the small runtime types they exchange with rlvr.

A plugin's hook calls ``register(Reward(...))`` (or ``Algorithm``, ``Backend``,
``Environment``). A record is cheap to build: no torch, vllm or sympy import happens until
its ``factory`` is called, so ``rlvr plugins`` and ``rlvr validate`` stay fast. The host fills
in ``dist`` (which installed distribution provided the record).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from rlvr.api.runtime import REWARD_LIMIT, BatchOutput, TrainerState

if TYPE_CHECKING:
    from rlvr.api.runtime import AlgorithmImpl, EnvironmentImpl, Generator, RunInfo


class Params(BaseModel):
    """Base class for a plugin's params model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- rewards


@dataclass(frozen=True)
class Sample:
    """One completion as a reward sees it.

    ``row`` holds every field of the dataset row (e.g. GSM8K's ``answer``). ``num_tokens`` is
    the completion's token length when the caller knows it (always during training), and
    ``completion_ids`` its sampled token ids (``rlvr rewards score``: the row's, else the
    config's model's tokens of the text, else None). ``group`` tells which samples answer the
    same prompt (the prompt's group in training and eval, the prompt text when scoring a
    file): a batched reward's ``batch: group`` batches by it. ``state`` is where training stands.

    A multi-turn episode (an environment) is seen through its reward entry's ``scope``:
    ``"answer"`` (the default), ``completion`` is the last assistant message and
    ``completion_ids``/``num_tokens`` that turn's sampled tokens; ``"transcript"``, they are
    the whole episode after the first prompt (every turn, sampled and environment's, decoded
    without special tokens). Either way ``messages`` is the whole conversation (prompt
    included) and ``env_rewards`` the named rewards the environment returned; both are empty
    for a single completion.
    """

    completion: str
    prompt: str = ""
    row: Mapping[str, Any] = field(default_factory=dict)
    num_tokens: int | None = None
    completion_ids: tuple[int, ...] | None = None
    group: int | str | None = None
    state: TrainerState = TrainerState()
    messages: tuple[Mapping[str, Any], ...] = ()
    env_rewards: Mapping[str, float] = field(default_factory=dict)


class RewardFn(Protocol):
    """What a reward factory returns: a picklable callable scoring one sample.

    Returns a float (finite, at most :data:`REWARD_LIMIT` in magnitude), or ``None`` for "not
    applicable" (counted as 0 in the weighted sum and left out of that reward's mean; a
    completion every reward left None is out of its group's baseline, advantage 0, as TRL).
    """

    def __call__(self, sample: Sample) -> float | None: ...


class BatchRewardFn(Protocol):
    """What the factory of a batched reward (``Reward(batched=True)``) returns: a picklable
    callable scoring a batch of samples at once (a TRL reward function's convention).

    Returns one value per sample, in order (each as :class:`RewardFn`'s), as a sequence or as
    a :class:`~rlvr.api.runtime.BatchOutput` with what it logged. A raise (or a wrong number
    of values) fails every sample of the batch.
    """

    def __call__(self, samples: list[Sample]) -> Sequence[float | None] | BatchOutput: ...


class RewardFactory(Protocol):
    """``factory(params)``: builds the reward function inside a reward worker."""

    def __call__(self, params: Any, /) -> RewardFn | BatchRewardFn: ...


@dataclass(frozen=True)
class Reward:
    """A reward plugin.

    ``factory(params)`` runs inside each reward worker process and must be importable by
    reference (a module-level function or class), so it can be sent to the workers.
    ``fields(params)`` names the dataset fields the reward reads, so a dataset lacking one is
    reported before training starts. ``correctness``: the reward checks the answer (its score
    at least its params' ``correct``, else 1, means right), so ``rlvr eval`` may judge
    accuracy by it when no reward is marked ``correctness: true``
    (:func:`rlvr.evaluation.correctness.correctness`).
    ``runs_code(params)`` names the Python code a config
    entry makes the reward import and run (``callable``'s ``function``), None when it runs
    none: such an entry needs the user's ``--allow-code`` (a config alone never runs code).
    ``remote_code(params)`` names the model whose own Python files the entry would run
    (``trust_remote_code``), None when none: that needs ``--trust-remote-code``.

    ``batched``: the factory builds a :class:`BatchRewardFn`, called on a batch of samples;
    ``batch(params)`` says which: ``"call"`` (every sample of a scoring round: a training
    step's completions on this rank, an eval batch) or ``"group"`` (the samples of one
    prompt). Its ``timeout`` bounds one call, so the whole batch: raise it for a reward
    whose batch takes longer (a judge answering one completion at a time).
    ``in_process``: the reward runs in the scoring process itself (a reward model on the
    trainer's GPU), never in the reward workers; it has no timeout there.
    ``scope``: what it scores of a multi-turn episode by default, the final answer
    (``"answer"``) or the whole transcript (``"transcript"``); a config entry's ``scope``
    overrides it (see :class:`Sample`). A single completion is both.
    """

    name: str
    params: type[Params]
    factory: RewardFactory
    description: str
    fields: Callable[[Any], tuple[str, ...]] = lambda params: ()
    runs_code: Callable[[Any], str | None] = lambda params: None
    dist: str | None = None
    correctness: bool = False
    batched: bool = False
    batch: Callable[[Any], Literal["call", "group"]] = lambda params: "call"
    in_process: bool = False
    remote_code: Callable[[Any], str | None] = lambda params: None
    scope: Literal["answer", "transcript"] = "answer"


# --------------------------------------------------------------------------- algorithms


@dataclass(frozen=True)
class Requirements:
    """What an algorithm needs from the rest of the run, checked before any model loads."""

    reference_model: bool = False
    value_model: bool = False
    old_logprobs: bool = True
    sampler_logprobs: bool = False
    min_group_size: int = 1
    #: the params key that makes ``reference_model`` true (e.g. ``"beta"``), so a config
    #: problem about the reference model can point at it
    reference_model_param: str | None = None


class AlgorithmFactory(Protocol):
    """``factory(params, run)``: builds the algorithm object the trainer drives."""

    def __call__(self, params: Any, run: RunInfo, /) -> AlgorithmImpl: ...


@dataclass(frozen=True)
class Algorithm:
    """An algorithm plugin: ``factory(params, run)`` builds the object the trainer drives.

    ``requirements(params)`` must be cheap (no torch): config validation calls it, and it is
    the only place the trainer learns what the algorithm needs. The built object's interface
    is :class:`rlvr.api.runtime.AlgorithmImpl`.
    """

    name: str
    params: type[Params]
    factory: AlgorithmFactory
    description: str
    requirements: Callable[[Any], Requirements] = lambda params: Requirements()
    dist: str | None = None


# --------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class Capabilities:
    """What a generation backend can provide."""

    sampler_logprobs: bool = False
    reference_logprobs: bool = True
    #: False for a backend that samples from its own copy of the weights (vLLM, synced after
    #: each update): under FSDP the trainer then leaves the policy sharded while generating.
    samples_from_policy: bool = True
    #: True for a backend that takes any number of sequences in one call and batches them
    #: within its own memory budget (vLLM's scheduler and KV cache): evaluation then hands it
    #: large calls (:func:`rlvr.evaluation.loop.eval_call_sequences`), which it decodes
    #: together.
    schedules_batches: bool = False


class BackendFactory(Protocol):
    """``factory(params, run, model, tokenizer)``: builds the generator on the policy model
    (a transformers model) and its tokenizer."""

    def __call__(self, params: Any, run: RunInfo, model: Any, tokenizer: Any, /) -> Generator: ...


@dataclass(frozen=True)
class Backend:
    """A rollout backend plugin: ``factory(params, run, model, tokenizer)`` builds the
    generator (:class:`rlvr.api.runtime.Generator`).

    ``available()`` returns ``None`` when the backend can run here, else a message saying what
    is missing and how to install it (checked by ``rlvr validate`` before anything loads).
    """

    name: str
    params: type[Params]
    factory: BackendFactory
    description: str
    capabilities: Capabilities = Capabilities()
    available: Callable[[], str | None] = lambda: None
    dist: str | None = None


# --------------------------------------------------------------------------- environments


class EnvironmentFactory(Protocol):
    """``factory(params, run)``: builds the environment the episodes run against."""

    def __call__(self, params: Any, run: RunInfo, /) -> EnvironmentImpl: ...


@dataclass(frozen=True)
class Environment:
    """An environment plugin: ``factory(params, run)`` builds the object episodes talk to
    (:class:`rlvr.api.runtime.EnvironmentImpl`).

    ``multi_turn`` False marks an environment whose episode is one completion of the dataset
    prompt (``single_turn``): training then samples it on the single-completion path, exactly
    as without environments, and never calls the built object. ``runs_code(params)`` names the
    Python code the entry makes the environment import and run (an adapter given a user's
    class), None when it runs none: as for a reward, that needs the user's ``--allow-code``.

    ``rewards(params)`` names the rewards its episodes return (``EnvResponse.rewards`` and
    the optional ``group_rewards``), so that ``environment.reward_weights`` is checked against
    them before anything loads; None: not known before the run (any name is accepted).
    ``data(params)`` is the ``data:`` section the environment provides when it is its own
    task source (``reasoning_gym``: ``{"reasoning_gym": {...}}``), merged under the user's
    ``data:`` keys; None: the rows come from ``data:`` as usual.
    """

    name: str
    params: type[Params]
    factory: EnvironmentFactory
    description: str
    multi_turn: bool = True
    dist: str | None = None
    runs_code: Callable[[Any], str | None] = lambda params: None
    rewards: Callable[[Any], tuple[str, ...] | None] = lambda params: None
    data: Callable[[Any], dict[str, Any] | None] = lambda params: None


@dataclass(frozen=True)
class LazyFactory:
    """A factory named ``"module:attr"``, imported on its first call.

    Registering a plugin must stay cheap (``rlvr plugins`` and ``rlvr validate`` load every
    plugin): a factory whose module imports torch, vLLM or math-verify is registered as
    ``LazyFactory("my_pkg.impl:MyAlgorithm")``, and that module loads when a run builds it.
    """

    target: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)(*args, **kwargs)


# --------------------------------------------------------------------------- callbacks


class CallbackFactory(Protocol):
    """``factory(params, run)``: builds the object a run calls back (see :class:`Callback`)."""

    def __call__(self, params: Any, run: RunInfo, /) -> Any: ...


@dataclass(frozen=True)
class Callback:
    """A callback plugin: ``factory(params, run)`` builds an object that observes a run and
    may stop it; a logger (tensorboard, wandb, trackio, mlflow) is one.

    The object has any of the methods ``on_run_start``, ``on_step_end``, ``on_log``,
    ``on_evaluate``, ``on_save``, ``on_run_end`` (:class:`rlvr.api.runtime.RunCallback`
    lists their keyword arguments); each gets only the arguments its signature names, as
    pluggy calls hooks. A run uses the callbacks its config names (``callbacks:``, and the
    loggers of ``training.report_to``). ``available()``: None when it can run here, else what
    to install (``rlvr validate`` says it before anything loads). ``logger``: one of the sinks
    ``report_to: all`` picks when installed.
    """

    name: str
    params: type[Params]
    factory: CallbackFactory
    description: str
    available: Callable[[], str | None] = lambda: None
    logger: bool = False
    dist: str | None = None


Record = Reward | Algorithm | Backend | Environment | Callback

#: How many positional arguments each kind's factory is called with (checked at registration).
FACTORY_ARGS: dict[type, tuple[str, ...]] = {
    Reward: ("params",),
    Algorithm: ("params", "run"),
    Backend: ("params", "run", "model", "tokenizer"),
    Environment: ("params", "run"),
    Callback: ("params", "run"),
}

__all__ = [
    "FACTORY_ARGS",
    "LazyFactory",
    "Algorithm",
    "AlgorithmFactory",
    "Backend",
    "BackendFactory",
    "BatchOutput",
    "BatchRewardFn",
    "Callback",
    "CallbackFactory",
    "Capabilities",
    "Environment",
    "EnvironmentFactory",
    "Params",
    "Record",
    "Requirements",
    "REWARD_LIMIT",
    "Reward",
    "RewardFactory",
    "RewardFn",
    "Sample",
    "TrainerState",
]
