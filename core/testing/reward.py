"""``check_reward``: a reward plugin against rlvr's contract, on default samples (GSM8K-like
completions, :func:`default_samples`) or the caller's."""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlvr.rewards.scoring import ScoreEntry, Scorer
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
    from rlvr.api.registration import Reward, Sample


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
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.api.registration import Sample

    return tuple(
        Sample(completion=text, prompt=_ROW["prompt"], row=dict(_ROW), num_tokens=tokens)
        for text, tokens in _COMPLETIONS
    )


SAMPLE_FIELDS = tuple(_ROW)


def check_reward(
    record_or_name: Reward | str,
    samples: Sequence[Sample] | None = None,
    params: Mapping[str, Any] | Any | None = None,
    *,
    host: Host | None = None,
    workers: int = 0,
) -> list[float | None]:
    """Check a reward plugin and return its value (a float or None) for each sample.

    ``samples`` defaults to :func:`default_samples`; a reward that reads other dataset fields (its
    ``fields(params)``) needs samples whose rows have them. ``params`` is a dict (validated by
    the reward's params model) or a params instance; None means the defaults. With
    ``workers > 0`` the samples are also scored through rlvr's real worker pool
    (:class:`rlvr.rewards.scoring.Scorer`), which must give the same values.
    """
    record = resolve("reward", record_or_name, host)
    label = f"reward {record.name!r}"
    p = validated_params(label, record, params)
    check_params_model(label, p)
    fields = call(label, "fields(params)", record.fields, p)
    if not isinstance(fields, tuple | list) or not all(isinstance(f, str) for f in fields):
        raise fail(label, f"fields(params) must return a tuple of field names, got {fields!r}")
    if samples is None:
        missing = [f for f in fields if f not in SAMPLE_FIELDS]
        if missing:
            raise fail(
                label,
                f"it reads dataset fields {missing} that the built-in samples lack (they have "
                f"{list(SAMPLE_FIELDS)}); pass samples=[Sample(completion=..., row={{...}})]",
            )
        samples = default_samples()
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.api.registration import Sample

    for i, sample in enumerate(samples):
        if not isinstance(sample, Sample):
            raise TypeError(f"samples[{i}] is {sample!r}, expected an rlvr.api.registration.Sample")
        absent = [f for f in fields if f not in sample.row]
        if absent:
            raise fail(label, f"samples[{i}].row lacks the fields {absent} the reward reads")
    try:
        factory, sent = pickle.loads(pickle.dumps((record.factory, p)))
    except Exception as exc:
        raise fail(
            label,
            f"its factory {record.factory!r} cannot be pickled ({type(exc).__name__}: {exc}); "
            "reward workers import the factory by reference, so it must be a module-level "
            "function or class, not a lambda, a nested function or a bound method",
        ) from None
    fn = call(label, "factory(params)", factory, sent)
    if not callable(fn):
        raise fail(label, f"factory(params) returned {fn!r}, which is not callable")
    values: list[float | None] = []
    if record.batched:  # one call on all the samples, one value back for each
        out = call(label, f"scoring a batch of {len(samples)} samples", fn, list(samples))
        out = getattr(out, "values", out)  # a BatchOutput's values
        if isinstance(out, str | bytes) or not hasattr(out, "__len__") or len(out) != len(samples):
            raise fail(
                label,
                f"a batched reward returned {out!r} for {len(samples)} samples; it returns one "
                "value (a float or None) per sample, in order",
            )
        outputs = list(out)
    else:
        outputs = [
            call(label, f"scoring samples[{i}] ({sample.completion[:40]!r})", fn, sample)
            for i, sample in enumerate(samples)
        ]
    for i, (sample, value) in enumerate(zip(samples, outputs, strict=True)):
        if value is not None and not finite_number(value):
            raise fail(
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
        raise fail(
            label,
            f"in the worker pool {scores.errors.get(record.name, 0)} calls failed and "
            f"{scores.timeouts.get(record.name, 0)} timed out: {'; '.join(messages)}",
        )
    got = scores.per_reward[record.name]
    if got != expected:
        raise fail(label, f"the worker pool scored {got}, in-process scoring gave {expected}")
