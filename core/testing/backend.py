"""``check_backend``: a backend plugin generating on a tiny model; each
:class:`~rlvr.api.runtime.Generation` checked for counts, group layout, EOS and truncation,
texts and logprobs."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.api.runtime import Generator, RunInfo, SamplingParams, missing_members
from rlvr.testing.conformance import (
    call,
    check_params_model,
    fail,
    finite_number,
    resolve,
    validated_params,
)
from rlvr.testing.fixtures import tiny_model_dir

try:  # the fixtures need pytest; the checks do not
    import pytest
except ImportError:  # pragma: no cover - rlvr.testing used outside a test run
    pytest = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from rlvr.api.host import Host
    from rlvr.api.registration import Backend, Capabilities


# The prompts check_backend generates for (documented where rlvr.testing names them).
PROMPTS = (
    "What is 12 + 30?",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether?",
    "<|im_start|>user\nWhat is 7 * 6?<|im_end|>\n<|im_start|>assistant\n",
)


def check_backend(
    record_or_name: Backend | str,
    params: Mapping[str, Any] | Any | None = None,
    *,
    host: Host | None = None,
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
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.api.registration import Capabilities

    record = resolve("backend", record_or_name, host)
    label = f"backend {record.name!r}"
    p = validated_params(label, record, params)
    check_params_model(label, p)
    caps = record.capabilities
    if not isinstance(caps, Capabilities):
        raise fail(
            label, f"capabilities must be an rlvr.api.registration.Capabilities, got {caps!r}"
        )
    missing = call(label, "available()", record.available)
    if missing is not None:
        if not isinstance(missing, str):
            raise fail(label, f"available() must return None or a message, got {missing!r}")
        if skip_unavailable and pytest is not None:
            pytest.skip(f"{label} is not available here: {missing}")
        raise fail(label, f"not available here: {missing}")

    # loads torch, pydantic and transformers: not when pytest loads rlvr.testing (see its __init__)
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
    gen = call(
        label, "factory(params, run, model, tokenizer)", record.factory, p, run, model, tokenizer
    )
    missing = missing_members(gen, Generator)
    if missing:
        raise fail(
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
            call(label, "sync_weights(model)", gen.sync_weights, model)
        sent = [list(x) for x in batch_prompts]
        out = call(label, f"generate(n={n}, {sampling})", gen.generate, sent, n, sampling)
        if sent != batch_prompts:
            raise fail(label, "generate() modified the prompt token lists it was given")
        where = f"generate({len(batch_prompts)} prompts, n={n}, temperature={sampling.temperature})"
        _check_generation(
            label, where, out, len(batch_prompts), n, sampling, eos, vocab, caps, tokenizer
        )
        if greedy_groups and sampling.temperature == 0:
            for j in range(len(batch_prompts)):
                group = [list(ids) for ids in out.token_ids[j * n : (j + 1) * n]]
                if any(ids != group[0] for ids in group):
                    raise fail(
                        label,
                        f"{where}: the greedy completions of prompt {j} differ; completion i "
                        "must belong to prompt i // n (pass greedy_groups=False for a backend "
                        "that does not sample from the model)",
                    )
    call(label, "close()", gen.close)
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
            raise fail(label, f"{where} returned {out!r}, expected an rlvr.api.runtime.Generation")
    expected = num_prompts * n
    for attr in ("token_ids", "texts", "truncated"):
        got = len(getattr(out, attr))
        if got != expected:
            raise fail(
                label,
                f"{where}: {attr} has {got} entries, expected {num_prompts} prompts x {n} = "
                f"{expected} (completion i belongs to prompt i // n)",
            )
    max_tokens = sampling.max_tokens
    for i, ids in enumerate(out.token_ids):
        ids = list(ids)
        if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in ids):
            raise fail(label, f"{where}: token_ids[{i}] holds non-integers: {ids}")
        if any(not 0 <= x < vocab for x in ids):
            raise fail(label, f"{where}: token_ids[{i}] has ids outside the vocabulary: {ids}")
        if not 1 <= len(ids) <= max_tokens:
            raise fail(
                label,
                f"{where}: completion {i} has {len(ids)} tokens, expected 1 to max_tokens = "
                f"{max_tokens} (prompt and padding excluded)",
            )
        first_eos = next((k for k, x in enumerate(ids) if x in eos), None)
        cut = out.truncated[i]
        if not isinstance(cut, bool | int):
            raise fail(label, f"{where}: truncated[{i}] is {cut!r}, expected a bool")
        if first_eos is not None and first_eos != len(ids) - 1:
            raise fail(
                label,
                f"{where}: completion {i} goes on after an end-of-sequence token at position "
                f"{first_eos}; cut it there (keeping the EOS token)",
            )
        if cut and (first_eos is not None or len(ids) != max_tokens):
            raise fail(
                label,
                f"{where}: completion {i} is flagged truncated but has {len(ids)} tokens "
                f"(max_tokens {max_tokens}) and {'an' if first_eos is not None else 'no'} EOS; "
                "truncated means it reached max_tokens without an EOS",
            )
        if not cut and first_eos is None:
            raise fail(
                label,
                f"{where}: completion {i} has no EOS token but is not flagged truncated; keep "
                "the EOS token in token_ids, or flag the completion truncated",
            )
        text = out.texts[i]
        decoded = tokenizer.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        if not isinstance(text, str) or text != decoded:
            raise fail(
                label,
                f"{where}: texts[{i}] = {text!r} is not the decoded completion {decoded!r} "
                "(tokenizer.decode(token_ids, skip_special_tokens=True))",
            )
    if caps.sampler_logprobs:
        if out.logprobs is None or len(out.logprobs) != expected:
            raise fail(
                label,
                f"{where}: Capabilities.sampler_logprobs is declared but logprobs is "
                f"{'None' if out.logprobs is None else f'{len(out.logprobs)} entries'}",
            )
        for i, (ids, lps) in enumerate(zip(out.token_ids, out.logprobs, strict=True)):
            lps = list(lps)
            if len(lps) != len(ids):
                raise fail(
                    label, f"{where}: logprobs[{i}] has {len(lps)} values for {len(ids)} tokens"
                )
            if not all(finite_number(x) and x <= 1e-4 for x in lps):
                raise fail(label, f"{where}: logprobs[{i}] are not finite log-probabilities: {lps}")
    elif out.logprobs is not None:
        raise fail(
            label,
            f"{where}: returns logprobs but does not declare Capabilities(sampler_logprobs=True); "
            "declare it so algorithms that need them can use this backend",
        )
