"""Test helpers for rlvr plugins (``rlvr.testing``): pytest fixtures and conformance checks.

rlvr registers this module with pytest through pytest's own entry point (``pytest11``, named
``rlvr.testing`` after the module, so that ``-p rlvr.testing`` or ``pytest_plugins =
["rlvr.testing"]`` on top of it is harmless; ``-p no:rlvr.testing`` disables it), so in any
project where rlvr is installed the fixtures are there without a ``conftest.py``:

- ``rlvr_host``: a fresh :class:`rlvr.api.host.PluginHost` with every installed plugin (entry
  points).
- ``rlvr_host_factory``: ``make(plugins=[...], entrypoints=True)`` builds hosts, e.g. with an
  in-process plugin object and without the installed ones (``entrypoints=False``).
- ``rlvr_tiny_model``: a directory holding a tiny random model (built once per process by
  :func:`rlvr.model.tiny.build_tiny_model`; the one :func:`check_backend` uses by default).

The checks are plain functions a plugin's own tests call; each takes the registered record or
its name (looked up among the installed plugins) and raises :class:`ConformanceError` (an
``AssertionError``) that says what is wrong and how to fix it:

- :func:`check_reward`: the params model rejects unknown keys and survives the round trip a
  dumped config makes; the factory pickles by reference (as the reward workers need) and
  builds; the reward returns a finite float or None for every sample. Returns the values.
- :func:`check_algorithm`: builds it with a :class:`~rlvr.api.runtime.RunInfo`, runs ``select``,
  ``prepare`` and ``loss`` on a synthetic :class:`~rlvr.api.runtime.RolloutBatch` holding only
  the tensors its requirements ask for; the loss must be finite, differentiable, zero-gradient
  on padding, and additive over micro-batches.
- :func:`check_backend`: builds it on a tiny model and checks that ``generate`` returns a
  well-formed :class:`~rlvr.api.runtime.Generation` (counts, group layout, lengths, EOS and
  truncation flags, texts, logprobs as its capabilities declare).
- :func:`check_environment`: the params model's defaults validate; the environment builds, and
  scripted assistant messages drive episodes on a few rows: ``start`` returns an
  :class:`~rlvr.api.runtime.EpisodeStart` with messages (and valid tool schemas), ``respond``
  an :class:`~rlvr.api.runtime.EnvResponse` with finite named rewards, ``close`` works even
  right after ``start``, and two episodes run concurrently do not change each other (state
  lives in ``state``, not on the object). Returns the transcripts.
- :func:`validate_config`: a config dict validated against the installed plugins.

Loading this module is cheap (no torch): the checks import torch when they run.
"""

from __future__ import annotations

import atexit
import functools
import math
import numbers
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.api.runtime import Generator, RolloutBatch, RunInfo, SamplingParams, missing_members
from rlvr.rewards.scoring import ScoreEntry, Scorer

try:  # the fixtures need pytest; the checks do not
    import pytest
except ImportError:  # pragma: no cover - rlvr.testing used outside a test run
    pytest = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from rlvr.api.host import PluginHost
    from rlvr.api.registration import (
        Algorithm,
        Backend,
        Capabilities,
        Environment,
        Requirements,
        Reward,
        Sample,
    )
    from rlvr.rollout.envcheck import Transcript

# pytest loads this module in every test session of an environment where rlvr is installed,
# so it must cost nothing until used: what loads pydantic, torch or transformers (the host, the
# records, the config, the model) is imported inside the checks and fixtures that use it.


class ConformanceError(AssertionError):
    """A plugin does not follow rlvr's plugin contract; the message says how."""


def _fail(label: str, message: str) -> ConformanceError:
    return ConformanceError(f"{label}: {message}")


# --------------------------------------------------------------------------- fixtures

if pytest is not None:

    @pytest.fixture
    def rlvr_host() -> PluginHost:
        """A fresh host with every installed plugin (the ``rlvr`` entry points)."""
        # loads pydantic: not when pytest loads this module (see the top)
        from rlvr.api.host import create_host

        return create_host()

    @pytest.fixture
    def rlvr_host_factory() -> Callable[..., PluginHost]:
        """``make(plugins=[...], entrypoints=True)``: a fresh host per call.

        ``plugins`` are modules or objects with ``@rlvr.plugin.hookimpl`` methods, registered after
        the entry points; ``entrypoints=False`` leaves out every installed plugin (built-ins
        included).
        """

        def make(plugins: Iterable[object] = (), *, entrypoints: bool = True) -> PluginHost:
            # loads pydantic: not when pytest loads this module (see the top)
            from rlvr.api.host import create_host

            return create_host(entrypoints=entrypoints, plugins=list(plugins))

        return make

    @pytest.fixture(scope="session")
    def rlvr_tiny_model() -> Path:
        """A tiny random Qwen2 model and tokenizer directory (built once per process, the one
        :func:`check_backend` uses by default; do not modify it)."""
        return tiny_model_dir()


# --------------------------------------------------------------------------- config


def validate_config(
    data: Mapping[str, Any], *, host: PluginHost | None = None, require: tuple[str, ...] = ()
) -> Any:
    """Validate a config dict against the installed plugins (or ``host``); return the
    ``RunConfig``. Raises :class:`rlvr.config.schema.ConfigError` listing every problem.

    ``require`` names sections that must be present (``rlvr train`` requires
    ``("model", "data", "rewards", "algorithm", "backend")`` and fills in the default
    algorithm and backend).
    """
    # loads pydantic: not when pytest loads this module (see the top)
    from rlvr.api.host import create_host
    from rlvr.config.schema import validate

    return validate(dict(data), host or create_host(), require=require)


# --------------------------------------------------------------------------- shared checks


def _resolve(kind: str, record_or_name: Any, host: PluginHost | None) -> Any:
    """The record to check: given, or found by name among the installed plugins."""
    # loads pydantic: not when pytest loads this module (see the top)
    from rlvr.api.host import KINDS, check_record, create_host

    expected = KINDS[kind]
    if isinstance(record_or_name, str):
        host = host if host is not None else create_host()
        try:
            record = host.get(kind, record_or_name)
        except KeyError as exc:
            raise _fail(f"check_{kind}({record_or_name!r})", str(exc.args[0])) from None
    elif isinstance(record_or_name, expected):
        record = record_or_name
    else:
        raise TypeError(
            f"check_{kind} takes an rlvr.api.registration.{expected.__name__} or a {kind} name, "
            f"got {record_or_name!r}"
        )
    problem = check_record(record, expected)
    if problem:
        raise _fail(f"{kind} {getattr(record, 'name', record)!r}", problem)
    return record


def _params(label: str, record: Any, params: Any) -> Any:
    """``params`` as an instance of the record's params model (defaults when None)."""
    # loads pydantic: not when pytest loads this module (see the top)
    from pydantic import BaseModel, ValidationError

    model = record.params
    if isinstance(params, model):
        return params
    if isinstance(params, BaseModel):
        raise TypeError(f"{label}: params is a {type(params).__name__}, expected {model.__name__}")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"{label}: params must be a dict or a {model.__name__}, got {params!r}")
    data = dict(params or {})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        hint = " (its defaults are not valid on their own: pass params=...)" if not data else ""
        message = f"params {data!r} are not valid for {model.__name__}{hint}:\n{exc}"
        raise _fail(label, message) from None


_UNKNOWN_KEY = "rlvr_testing_unknown_key"


def _check_params_model(label: str, params: Any) -> None:
    """Unknown keys are errors; params pickle and survive a dumped config's round trip."""
    # loads pydantic: not when pytest loads this module (see the top)
    from pydantic import ValidationError

    model = type(params)
    dumped = params.model_dump(mode="json")
    try:
        model.model_validate({**dumped, _UNKNOWN_KEY: 1})
    except ValidationError as exc:
        if not any(err["type"] == "extra_forbidden" for err in exc.errors()):
            raise _fail(
                label,
                f"{model.__name__} did not report the unknown key {_UNKNOWN_KEY!r} as unknown "
                "(subclass rlvr.plugin.Params, which sets extra='forbid')",
            ) from None
    else:
        raise _fail(
            label,
            f"{model.__name__} accepts unknown keys, so a typo in a config goes unnoticed; "
            "subclass rlvr.plugin.Params (extra='forbid')",
        )
    try:
        again = model.model_validate(dumped)
    except ValidationError as exc:
        raise _fail(
            label,
            f"{model.__name__}.model_dump(mode='json') does not validate again, so a config "
            f"printed by `rlvr validate` would not reload:\n{exc}",
        ) from None
    if again != params:
        raise _fail(
            label,
            f"{model.__name__} changes in a JSON round trip ({params!r} -> {again!r}), so a "
            "config printed by `rlvr validate` would not reload as the same run",
        )
    try:
        pickle.loads(pickle.dumps(params))
    except Exception as exc:
        raise _fail(label, f"params cannot be pickled ({type(exc).__name__}: {exc})") from None


def _finite_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and math.isfinite(value)


def _check_metrics(label: str, where: str, metrics: Any) -> dict[str, float]:
    if not isinstance(metrics, Mapping):
        raise _fail(
            label, f"{where} must return metrics as a dict of str to float, got {metrics!r}"
        )
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise _fail(label, f"{where}: metric name {key!r} is not a string")
        if not _finite_number(value):
            raise _fail(label, f"{where}: metric {key!r} = {value!r} is not a finite number")
    return {k: float(v) for k, v in metrics.items()}


def _call(label: str, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; an exception becomes a ConformanceError naming ``what``."""
    try:
        return fn(*args, **kwargs)
    except ConformanceError:
        raise
    except Exception as exc:
        raise _fail(label, f"{what} raised {type(exc).__name__}: {exc}") from exc


# --------------------------------------------------------------------------- rewards

_ROW = {
    "prompt": "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether in April and May?",
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as "
    "many clips in May. How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = "
    "<<48+24=72>>72 clips altogether in April and May.\n#### 72",
}

_COMPLETIONS: tuple[tuple[str, int | None], ...] = (
    ("<think>48 / 2 = 24 in May, 48 + 24 = 72.</think>\n<answer>72</answer>", 24),
    ("<think>48 + 48 / 2</think>\n<answer>70</answer>", 14),
    ("She sold 72 clips altogether.", 7),
    ("", 0),
    ("So the total is $\\boxed{72}$.", 11),
    ("```python\nprint(48 + 48 // 2)\n```", 16),
    ("<answer></answer> ¯\\_(ツ)_/¯ \U0001f916 \x00 <think>", 20),
    ("blah " * 2000, 2000),
    ("72", None),
)


def default_samples() -> tuple[Sample, ...]:
    """The completions :func:`check_reward` scores by default (also ``rlvr.testing.SAMPLES``):
    right, wrong, unformatted, empty, LaTeX, code, odd characters, very long; with and without
    a token count. Every row holds the fields ``prompt``, ``question`` and ``answer`` (GSM8K's
    ``#### N`` answer)."""
    # loads pydantic: not when pytest loads this module (see the top)
    from rlvr.api.registration import Sample

    return tuple(
        Sample(completion=text, prompt=_ROW["prompt"], row=dict(_ROW), num_tokens=tokens)
        for text, tokens in _COMPLETIONS
    )


def __getattr__(name: str) -> Any:
    if name == "SAMPLES":
        return default_samples()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SAMPLE_FIELDS = tuple(_ROW)


def check_reward(
    record_or_name: Reward | str,
    samples: Sequence[Sample] | None = None,
    params: Mapping[str, Any] | Any | None = None,
    *,
    host: PluginHost | None = None,
    workers: int = 0,
) -> list[float | None]:
    """Check a reward plugin and return its value (a float or None) for each sample.

    ``samples`` defaults to :func:`default_samples`; a reward that reads other dataset fields (its
    ``fields(params)``) needs samples whose rows have them. ``params`` is a dict (validated by
    the reward's params model) or a params instance; None means the defaults. With
    ``workers > 0`` the samples are also scored through rlvr's real worker pool
    (:class:`rlvr.rewards.scoring.Scorer`), which must give the same values.
    """
    record = _resolve("reward", record_or_name, host)
    label = f"reward {record.name!r}"
    p = _params(label, record, params)
    _check_params_model(label, p)
    fields = _call(label, "fields(params)", record.fields, p)
    if not isinstance(fields, tuple | list) or not all(isinstance(f, str) for f in fields):
        raise _fail(label, f"fields(params) must return a tuple of field names, got {fields!r}")
    if samples is None:
        missing = [f for f in fields if f not in SAMPLE_FIELDS]
        if missing:
            raise _fail(
                label,
                f"it reads dataset fields {missing} that the built-in samples lack (they have "
                f"{list(SAMPLE_FIELDS)}); pass samples=[Sample(completion=..., row={{...}})]",
            )
        samples = default_samples()
    # loads pydantic: not when pytest loads this module (see the top)
    from rlvr.api.registration import Sample

    for i, sample in enumerate(samples):
        if not isinstance(sample, Sample):
            raise TypeError(f"samples[{i}] is {sample!r}, expected an rlvr.api.registration.Sample")
        absent = [f for f in fields if f not in sample.row]
        if absent:
            raise _fail(label, f"samples[{i}].row lacks the fields {absent} the reward reads")
    try:
        factory, sent = pickle.loads(pickle.dumps((record.factory, p)))
    except Exception as exc:
        raise _fail(
            label,
            f"its factory {record.factory!r} cannot be pickled ({type(exc).__name__}: {exc}); "
            "reward workers import the factory by reference, so it must be a module-level "
            "function or class, not a lambda, a nested function or a bound method",
        ) from None
    fn = _call(label, "factory(params)", factory, sent)
    if not callable(fn):
        raise _fail(label, f"factory(params) returned {fn!r}, which is not callable")
    values: list[float | None] = []
    if record.batched:  # one call on all the samples, one value back for each
        out = _call(label, f"scoring a batch of {len(samples)} samples", fn, list(samples))
        out = getattr(out, "values", out)  # a BatchOutput's values
        if isinstance(out, str | bytes) or not hasattr(out, "__len__") or len(out) != len(samples):
            raise _fail(
                label,
                f"a batched reward returned {out!r} for {len(samples)} samples; it returns one "
                "value (a float or None) per sample, in order",
            )
        outputs = list(out)
    else:
        outputs = [
            _call(label, f"scoring samples[{i}] ({sample.completion[:40]!r})", fn, sample)
            for i, sample in enumerate(samples)
        ]
    for i, (sample, value) in enumerate(zip(samples, outputs, strict=True)):
        if value is not None and not _finite_number(value):
            raise _fail(
                label,
                f"returned {value!r} ({type(value).__name__}) for samples[{i}] "
                f"({sample.completion[:40]!r}); a reward returns a finite float, or None for "
                "'not applicable'",
            )
        values.append(None if value is None else float(value))
    if workers > 0:
        _check_in_pool(label, record, p, samples, values, workers)
    return values


def _check_in_pool(
    label: str,
    record: Reward,
    params: Any,
    samples: Sequence[Sample],
    expected: list[float | None],
    workers: int,
) -> None:
    entry = ScoreEntry(
        label=record.name,
        factory=record.factory,
        params=params,
        fallback=None,
        batch=record.batch(params) if record.batched else None,
        in_process=record.in_process,
    )
    with Scorer([entry], workers=workers) as scorer:
        scores = scorer.score(list(samples))
    messages = scores.error_messages.get(record.name) or []
    if scores.errors.get(record.name) or scores.timeouts.get(record.name):
        raise _fail(
            label,
            f"in the worker pool {scores.errors.get(record.name, 0)} calls failed and "
            f"{scores.timeouts.get(record.name, 0)} timed out: {'; '.join(messages)}",
        )
    got = scores.per_reward[record.name]
    if got != expected:
        raise _fail(label, f"the worker pool scored {got}, in-process scoring gave {expected}")


# --------------------------------------------------------------------------- environments


def check_environment(
    record_or_name: Environment | str,
    params: Mapping[str, Any] | Any | None = None,
    *,
    rows: Sequence[Mapping[str, Any]] | None = None,
    script: Sequence[str] | None = None,
    host: PluginHost | None = None,
    timeout: float = 30.0,
) -> list[Transcript]:
    """Check an environment plugin without a model; return the episodes it ran (one per row).

    ``rows`` are the dataset rows episodes start from (default: two rows with ``prompt`` and
    ``answer``, :data:`rlvr.rollout.envcheck.DEFAULT_ROWS`); ``script`` the assistant messages
    sent, one per turn, until the environment says ``done`` (default: text, a call to an
    unknown tool, a malformed call, an answer; tool calls are parsed as ``hermes``). Each
    :class:`~rlvr.rollout.envcheck.Transcript` holds the conversation, the environment's
    rewards and whether it ended (``done``), so a test can assert on them. ``rlvr env check``
    runs the same checks.
    """
    # loads pydantic: not when pytest loads this module (see the top)
    from rlvr.rollout.envcheck import EnvironmentCheckError, check_episodes

    record = _resolve("environment", record_or_name, host)
    label = f"environment {record.name!r}"
    p = _params(label, record, params)
    _check_params_model(label, p)
    try:
        return check_episodes(record, p, rows=rows, script=script, timeout=timeout)
    except EnvironmentCheckError as exc:
        raise ConformanceError(str(exc)) from None


# --------------------------------------------------------------------------- algorithms


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
    # loads torch: not when pytest loads this module (see the top)
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
    host: PluginHost | None = None,
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
    # loads pydantic: not when pytest loads this module (see the top)
    from rlvr.api.host import algorithm_problems
    from rlvr.api.registration import Requirements

    record = _resolve("algorithm", record_or_name, host)
    label = f"algorithm {record.name!r}"
    p = _params(label, record, params)
    _check_params_model(label, p)
    req = _call(label, "requirements(params)", record.requirements, p)
    if not isinstance(req, Requirements):
        raise _fail(label, f"requirements(params) returned {req!r}, expected Requirements")
    if not isinstance(req.min_group_size, int) or req.min_group_size < 1:
        raise _fail(label, f"requirements.min_group_size must be an int >= 1, got {req!r}")
    group = max(4, req.min_group_size)
    if run is None:
        run = RunInfo(max_completion_length=8, num_generations=group, seed=seed, max_steps=1000)
    impl = _call(label, "factory(params, run)", record.factory, p, run)
    problems = algorithm_problems(impl, req)
    if problems:
        raise _fail(
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
        raise _fail(
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
    # loads torch: not when pytest loads this module (see the top)
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
    keep = _call(label, f"select(batch) ({needs})", impl.select, batch)
    if keep is not None and not (
        isinstance(keep, torch.Tensor) and keep.dtype == torch.bool and keep.shape == (n,)
    ):
        raise _fail(
            label, f"select() must return None or a bool tensor of shape [{n}], got {keep!r}"
        )

    out = _call(label, f"prepare(batch) ({needs})", impl.prepare, batch)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], RolloutBatch)):
        raise _fail(label, f"prepare() must return (RolloutBatch, metrics dict), got {out!r}")
    prepared, prep_metrics = out
    adv = prepared.advantages
    if not isinstance(adv, torch.Tensor) or tuple(adv.shape) not in ((n,), (n, t)):
        shape = tuple(adv.shape) if isinstance(adv, torch.Tensor) else adv
        raise _fail(
            label, f"prepare() must set advantages of shape [{n}] or [{n}, {t}], got {shape}"
        )
    loss_mask = prepared.loss_mask if prepared.loss_mask is not None else batch.completion_mask
    if tuple(loss_mask.shape) != (n, t):
        raise _fail(label, f"loss_mask must have shape [{n}, {t}], got {tuple(loss_mask.shape)}")
    valid = loss_mask.bool() if adv.dim() == 2 else loss_mask.bool().any(dim=1)
    if not torch.isfinite(adv[valid]).all():
        raise _fail(label, f"prepare() set non-finite advantages: {adv}")
    if req.value_model and (prepared.returns is None or tuple(prepared.returns.shape) != (n, t)):
        raise _fail(label, f"a value-model algorithm's prepare() must set returns [{n}, {t}]")
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
        result = _call(
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
            raise _fail(
                label, f"loss() must return a LossOutput with a scalar loss, got {result!r}"
            )
        return result

    everything = torch.arange(n)
    result = loss_of(everything)
    loss = result.loss
    metrics.update(_check_metrics(label, "loss()", getattr(result, "metrics", {})))
    if not torch.isfinite(loss).all():
        raise _fail(label, f"loss() returned a non-finite loss {loss}")
    if not loss.requires_grad:
        raise _fail(label, "the loss does not depend on logp (it has no gradient)")
    loss.backward()
    grad = delta.grad
    if grad is not None and not torch.isfinite(grad).all():
        raise _fail(label, f"the gradient of the loss w.r.t. logp is not finite: {grad}")
    trains_values = values is not None and values.grad is not None
    if values is not None and values.grad is not None and not torch.isfinite(values.grad).all():
        raise _fail(label, "the gradient of the loss w.r.t. the values is not finite")
    trains_policy = grad is not None and bool(grad.abs().sum() > 0)
    if not trains_policy and not trains_values:
        raise _fail(
            label,
            f"at step {step} the gradient of the loss w.r.t. logp is "
            f"{'absent' if grad is None else 'zero everywhere'} (no policy gradient)",
        )
    if req.value_model and not trains_values:
        raise _fail(label, f"at step {step} the loss has no gradient w.r.t. the values")
    padding = ~batch.completion_mask.bool()
    if grad is not None and grad[padding].abs().max() > 0:
        raise _fail(label, "padding positions (completion_mask == 0) get a gradient")
    _check_inert(label, impl, prepared, needs, [grad, None if values is None else values.grad])

    with torch.no_grad():
        half = n // 2
        first = loss_of(everything[:half]).loss
        second = loss_of(everything[half:]).loss
        whole = loss_of(everything).loss
    if not torch.allclose(first + second, whole, rtol=1e-4, atol=1e-6):
        raise _fail(
            label,
            f"micro-batch losses do not add up: {float(first):.6g} + {float(second):.6g} != "
            f"{float(whole):.6g}; normalise by the num_tokens/num_seqs passed to loss() (the "
            "whole optimizer step's counts), not by the micro-batch's own",
        )
    return metrics, trains_policy


def _check_inert(label: str, impl: Any, prepared: Any, needs: str, grads: list[Any]) -> None:
    """The optional ``inert(batch)``: None or a bool ``[N]`` mask, and the rows it names have
    no gradient (the update skips their passes, so a wrong mask would change training)."""
    # loads torch: not when pytest loads this module (see the top)
    import torch

    inert = getattr(impl, "inert", None)
    if inert is None:
        return
    n = len(prepared)
    skip = _call(label, f"inert(batch) ({needs})", inert, prepared)
    if skip is None:
        return
    if not (isinstance(skip, torch.Tensor) and skip.dtype == torch.bool and skip.shape == (n,)):
        raise _fail(
            label, f"inert() must return None or a bool tensor of shape [{n}], got {skip!r}"
        )
    for name, grad in zip(("logp", "the values"), grads, strict=True):
        if grad is not None and bool(skip.any()) and grad[skip].abs().max() > 0:
            rows = torch.nonzero(skip).squeeze(1).tolist()
            raise _fail(
                label,
                f"inert() names rows {rows}, but the loss has a gradient w.r.t. {name} there; "
                "the update skips inert rows, so return False (or None) for any row whose "
                "loss has a term besides a zero advantage",
            )


# --------------------------------------------------------------------------- backends

#: Prompts :func:`check_backend` generates for (different lengths, one with a chat turn).
PROMPTS = (
    "What is 12 + 30?",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether?",
    "<|im_start|>user\nWhat is 7 * 6?<|im_end|>\n<|im_start|>assistant\n",
)


@functools.cache
def tiny_model_dir() -> Path:
    """A tiny model directory built once per process (removed when the process exits)."""
    # loads torch and transformers: not when pytest loads this module (see the top)
    from rlvr.model.tiny import build_tiny_model

    root = Path(tempfile.mkdtemp(prefix="rlvr-testing-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return build_tiny_model(root / "model")


def check_backend(
    record_or_name: Backend | str,
    params: Mapping[str, Any] | Any | None = None,
    *,
    host: PluginHost | None = None,
    model_dir: str | Path | None = None,
    greedy_groups: bool = True,
    skip_unavailable: bool = True,
    max_tokens: int = 6,
) -> Any:
    """Check a backend plugin on a tiny model; return the last :class:`Generation`.

    Builds it with ``factory(params, run, model, tokenizer)`` as the trainer does, on the
    model in ``model_dir`` (default: a tiny random model built in a temporary directory), and
    generates for :data:`PROMPTS` with several ``n``, temperatures and seeds, before and after
    ``sync_weights``. Each :class:`Generation` must hold ``len(prompts) * n`` completions;
    token ids (ints in the vocabulary) at most ``max_tokens`` long that end at their first EOS,
    or are exactly ``max_tokens`` long with no EOS and flagged ``truncated``; ``texts`` equal to
    ``tokenizer.decode(ids, skip_special_tokens=True)``; ``logprobs`` (finite, <= 0, one per
    token) exactly when ``Capabilities.sampler_logprobs`` is declared. With ``greedy_groups``,
    the ``n`` greedy (temperature 0) completions of a prompt must be equal, which shows that
    completion ``i`` belongs to prompt ``i // n``; turn it off for backends that do not sample
    from the model (replays). A backend whose ``available()`` reports a problem is skipped
    (``pytest.skip``) when ``skip_unavailable``, else fails.
    """
    # loads pydantic: not when pytest loads this module (see the top)
    from rlvr.api.registration import Capabilities

    record = _resolve("backend", record_or_name, host)
    label = f"backend {record.name!r}"
    p = _params(label, record, params)
    _check_params_model(label, p)
    caps = record.capabilities
    if not isinstance(caps, Capabilities):
        raise _fail(
            label, f"capabilities must be an rlvr.api.registration.Capabilities, got {caps!r}"
        )
    missing = _call(label, "available()", record.available)
    if missing is not None:
        if not isinstance(missing, str):
            raise _fail(label, f"available() must return None or a message, got {missing!r}")
        if skip_unavailable and pytest is not None:
            pytest.skip(f"{label} is not available here: {missing}")
        raise _fail(label, f"not available here: {missing}")

    # loads torch, pydantic and transformers: not when pytest loads this module (see the top)
    import torch

    from rlvr.config.schema import ModelConfig
    from rlvr.model.loading import eos_token_ids, load_policy

    directory = Path(model_dir) if model_dir is not None else tiny_model_dir()
    model_cfg = ModelConfig(name_or_path=str(directory), dtype="float32")
    model, tokenizer = load_policy(model_cfg, device="cpu", dtype=torch.float32)
    eos = set(eos_token_ids(model, tokenizer))
    vocab = max(len(tokenizer), int(model.config.vocab_size))
    prompts = [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in PROMPTS]
    run = RunInfo(
        max_completion_length=max_tokens,
        num_generations=2,
        max_prompt_length=max(len(x) for x in prompts),
    )
    gen = _call(
        label, "factory(params, run, model, tokenizer)", record.factory, p, run, model, tokenizer
    )
    missing = missing_members(gen, Generator)
    if missing:
        raise _fail(
            label,
            f"the generator {type(gen).__name__} lacks {', '.join(missing)} "
            "(see rlvr.api.runtime.Generator)",
        )

    cases = [
        (prompts, 2, SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=0)),
        (prompts[:1], 1, SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=1)),
        (prompts[1:], 3, SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=2)),
    ]
    out = None
    for step, (batch_prompts, n, sampling) in enumerate(cases):
        if step == len(cases) - 1:
            _call(label, "sync_weights(model)", gen.sync_weights, model)
        sent = [list(x) for x in batch_prompts]
        out = _call(label, f"generate(n={n}, {sampling})", gen.generate, sent, n, sampling)
        if sent != batch_prompts:
            raise _fail(label, "generate() modified the prompt token lists it was given")
        where = f"generate({len(batch_prompts)} prompts, n={n}, temperature={sampling.temperature})"
        _check_generation(
            label, where, out, len(batch_prompts), n, sampling, eos, vocab, caps, tokenizer
        )
        if greedy_groups and sampling.temperature == 0:
            for j in range(len(batch_prompts)):
                group = [list(ids) for ids in out.token_ids[j * n : (j + 1) * n]]
                if any(ids != group[0] for ids in group):
                    raise _fail(
                        label,
                        f"{where}: the greedy completions of prompt {j} differ; completion i "
                        "must belong to prompt i // n (pass greedy_groups=False for a backend "
                        "that does not sample from the model)",
                    )
    _call(label, "close()", gen.close)
    return out


def _check_generation(
    label: str,
    where: str,
    out: Any,
    num_prompts: int,
    n: int,
    sampling: Any,
    eos: set[int],
    vocab: int,
    caps: Capabilities,
    tokenizer: Any,
) -> None:
    for attr in ("token_ids", "texts", "truncated", "logprobs"):
        if not hasattr(out, attr):
            raise _fail(label, f"{where} returned {out!r}, expected an rlvr.api.runtime.Generation")
    expected = num_prompts * n
    for attr in ("token_ids", "texts", "truncated"):
        got = len(getattr(out, attr))
        if got != expected:
            raise _fail(
                label,
                f"{where}: {attr} has {got} entries, expected {num_prompts} prompts x {n} = "
                f"{expected} (completion i belongs to prompt i // n)",
            )
    max_tokens = sampling.max_tokens
    for i, ids in enumerate(out.token_ids):
        ids = list(ids)
        if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in ids):
            raise _fail(label, f"{where}: token_ids[{i}] holds non-integers: {ids}")
        if any(not 0 <= x < vocab for x in ids):
            raise _fail(label, f"{where}: token_ids[{i}] has ids outside the vocabulary: {ids}")
        if not 1 <= len(ids) <= max_tokens:
            raise _fail(
                label,
                f"{where}: completion {i} has {len(ids)} tokens, expected 1 to max_tokens = "
                f"{max_tokens} (prompt and padding excluded)",
            )
        first_eos = next((k for k, x in enumerate(ids) if x in eos), None)
        cut = out.truncated[i]
        if not isinstance(cut, bool | int):
            raise _fail(label, f"{where}: truncated[{i}] is {cut!r}, expected a bool")
        if first_eos is not None and first_eos != len(ids) - 1:
            raise _fail(
                label,
                f"{where}: completion {i} goes on after an end-of-sequence token at position "
                f"{first_eos}; cut it there (keeping the EOS token)",
            )
        if cut and (first_eos is not None or len(ids) != max_tokens):
            raise _fail(
                label,
                f"{where}: completion {i} is flagged truncated but has {len(ids)} tokens "
                f"(max_tokens {max_tokens}) and {'an' if first_eos is not None else 'no'} EOS; "
                "truncated means it reached max_tokens without an EOS",
            )
        if not cut and first_eos is None:
            raise _fail(
                label,
                f"{where}: completion {i} has no EOS token but is not flagged truncated; keep "
                "the EOS token in token_ids, or flag the completion truncated",
            )
        text = out.texts[i]
        decoded = tokenizer.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        if not isinstance(text, str) or text != decoded:
            raise _fail(
                label,
                f"{where}: texts[{i}] = {text!r} is not the decoded completion {decoded!r} "
                "(tokenizer.decode(token_ids, skip_special_tokens=True))",
            )
    if caps.sampler_logprobs:
        if out.logprobs is None or len(out.logprobs) != expected:
            raise _fail(
                label,
                f"{where}: Capabilities.sampler_logprobs is declared but logprobs is "
                f"{'None' if out.logprobs is None else f'{len(out.logprobs)} entries'}",
            )
        for i, (ids, lps) in enumerate(zip(out.token_ids, out.logprobs, strict=True)):
            lps = list(lps)
            if len(lps) != len(ids):
                raise _fail(
                    label, f"{where}: logprobs[{i}] has {len(lps)} values for {len(ids)} tokens"
                )
            if not all(_finite_number(x) and x <= 1e-4 for x in lps):
                raise _fail(
                    label, f"{where}: logprobs[{i}] are not finite log-probabilities: {lps}"
                )
    elif out.logprobs is not None:
        raise _fail(
            label,
            f"{where}: returns logprobs but does not declare Capabilities(sampler_logprobs=True); "
            "declare it so algorithms that need them can use this backend",
        )


__all__ = [
    "PROMPTS",
    "SAMPLE_FIELDS",
    "ConformanceError",
    "check_algorithm",
    "check_backend",
    "check_environment",
    "check_reward",
    "default_samples",
    "synthetic_batch",
    "tiny_model_dir",
    "validate_config",
]
