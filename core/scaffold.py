"""``rlvr new plugin``: write a ready-to-install plugin package.

:func:`new_plugin` writes ``rlvr-<name>/`` with a ``pyproject.toml`` (setuptools, a dependency
on rlvr, and the ``rlvr`` entry point that makes ``name: <name>`` usable in configs), a module
``rlvr_<name>`` holding one documented plugin of the chosen kind and its params model, a test
that runs rlvr's conformance checks (:mod:`rlvr.testing`), and a README. Right after
``pip install -e rlvr-<name>`` its tests pass and ``rlvr plugins`` lists it.

Rewards fit in one module. Algorithms and backends import torch, so their working code lives
in a second module that the factory imports when a run builds it: registering the plugin (what
``rlvr plugins`` and ``rlvr validate`` do) stays fast.
"""

from __future__ import annotations

import keyword
import re
import shutil
import tempfile
from pathlib import Path

from rlvr.host import PluginError

KINDS = ("reward", "algorithm", "backend")
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


class ScaffoldError(PluginError, ValueError):
    """The plugin package cannot be written (bad name, existing directory, taken name)."""


def check_name(name: str, kind: str, *, taken: bool = True) -> None:
    """Raise :class:`ScaffoldError` unless ``name`` can name a new ``kind`` plugin.

    A name is lowercase letters, digits and ``_``, starting with a letter: it is the name in
    configs and the suffix of the package ``rlvr_<name>``. With ``taken``, a name an installed
    plugin of that kind already registers is refused (two plugins with one name cancel out).
    """
    if kind not in KINDS:
        raise ScaffoldError(f"unknown plugin kind {kind!r}; use one of {', '.join(KINDS)}")
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 50:
        suggestion = re.sub(r"[^a-z0-9_]+", "_", str(name).lower()).strip("_")
        if suggestion and not suggestion[0].isalpha():
            suggestion = f"my_{suggestion}"
        hint = f" (e.g. {suggestion!r})" if suggestion and _NAME.match(suggestion) else ""
        raise ScaffoldError(
            f"invalid plugin name {name!r}: use lowercase letters, digits and '_', starting "
            f"with a letter, at most 50 characters{hint}; it becomes `name: <name>` in configs "
            "and the Python package rlvr_<name>"
        )
    if keyword.iskeyword(name):
        raise ScaffoldError(f"invalid plugin name {name!r}: it is a Python keyword")
    if taken:
        from rlvr.host import create_host

        host = create_host()
        record = host.records[kind].get(name)
        if record is not None or name in host.conflicts[kind]:
            owner = record.dist if record is not None else "several plugins"
            raise ScaffoldError(
                f"a {kind} named {name!r} is already registered by {owner or 'a plugin'}; two "
                "plugins registering one name cancel each other out, so pick another name"
            )


def new_plugin(name: str, *, kind: str, directory: str | Path = ".") -> Path:
    """Write the package ``<directory>/rlvr-<name>/`` for a ``kind`` plugin called ``name``.

    Refuses an invalid or already registered name, and an existing target directory (nothing
    is overwritten). The files are written to a temporary directory first, so a failure leaves
    nothing half-written. Returns the package directory.
    """
    check_name(name, kind)
    parent = Path(directory).expanduser()
    target = parent / f"rlvr-{name}"
    if target.exists():
        raise ScaffoldError(f"{target} already exists; remove it or choose another --dir")
    parent.mkdir(parents=True, exist_ok=True)
    files = render(name, kind)
    staging = Path(tempfile.mkdtemp(prefix=f".rlvr-{name}-", dir=parent))
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def class_name(name: str) -> str:
    """``my_reward`` -> ``MyReward``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def render(name: str, kind: str) -> dict[str, str]:
    """The package's files (relative path -> text), without writing anything."""
    if kind not in KINDS:
        raise ScaffoldError(f"unknown plugin kind {kind!r}; use one of {', '.join(KINDS)}")
    module = f"rlvr_{name}"
    templates = _TEMPLATES[kind]
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README_HEAD + templates["readme"] + _README_TAIL,
        f"{module}/__init__.py": templates["init"],
        f"tests/test_{name}.py": templates["test"],
    }
    if "impl" in templates:
        files[f"{module}/{templates['impl_name']}.py"] = templates["impl"]
    subs = {
        "__NAME__": name,
        "__CLS__": class_name(name),
        "__MODULE__": module,
        "__DIST__": f"rlvr-{name}",
        "__KIND__": kind,
        "__HOOK__": f"rlvr_register_{kind}s",
    }
    out = {}
    for path, text in files.items():
        for key, value in subs.items():
            text = text.replace(key, value)
        out[path] = text
    return out


# --------------------------------------------------------------------------- templates

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "__DIST__"
version = "0.1.0"
description = "An rlvr __KIND__ plugin: __NAME__."
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["rlvr"]

[project.optional-dependencies]
test = ["pytest>=8"]

# This entry point is what makes `name: __NAME__` usable in any rlvr config.
[project.entry-points.rlvr]
__NAME__ = "__MODULE__"

[tool.setuptools]
packages = ["__MODULE__"]

[tool.pytest.ini_options]
testpaths = ["tests"]

[tool.ruff]
line-length = 100
"""

_README_HEAD = """\
# __DIST__

An [rlvr](https://pypi.org/project/rlvr/) __KIND__ plugin, `__NAME__`.

## Install

```bash
pip install -e .        # from this directory; then `rlvr plugins` lists __NAME__
```

## Use
"""

_README_TAIL = """
## Test

```bash
pytest                  # runs rlvr.testing's conformance checks on the installed plugin
```

The checks (`rlvr.testing.check___KIND__`) find the plugin by name through its entry point, so
they test what users get; a plugin that does not follow rlvr's contract fails with a message
saying what to fix.

## Publish

The `[project.entry-points.rlvr]` table in `pyproject.toml` is the whole registration:
`python -m build` and `twine upload dist/*` put it on PyPI, and `pip install __DIST__` makes
`__NAME__` available to every rlvr config. Keep `rlvr` in `dependencies`.
"""

# ----------------------------------------------------------------- reward

_REWARD_README = """
```yaml
rewards:
  # 1.0 when the completion contains the text
  - name: __NAME__
    params: {text: "</answer>"}
  # 2.0 when it contains the row's `answer` field (a second entry needs its own label)
  - name: __NAME__
    label: __NAME___gold
    params: {field: answer, score: 2.0}
```

Score a file of completions with it: `rlvr rewards score -c config.yaml -i rows.jsonl -o out.jsonl`.
"""

_REWARD_INIT = '''\
"""The ``__NAME__`` reward plugin for rlvr.

Does the completion contain a given text?

After ``pip install -e .`` use it in any rlvr config::

    rewards:
      - name: __NAME__
        params: {text: "</answer>", score: 1.0}

A reward is a picklable callable built once per reward worker process by ``factory(params)``
and called once per completion with an :class:`rlvr.records.Sample`: ``completion``,
``prompt``, ``row`` (every field of the dataset row) and ``num_tokens``. It returns a float, or
None when it does not apply to the sample (counted as 0 in the weighted sum and left out of
this reward's mean). A call that raises or runs past the entry's ``timeout`` yields the
entry's ``fallback`` value; the run goes on.
"""

from __future__ import annotations

from pydantic import Field
from rlvr import hookimpl
from rlvr.records import Params, Reward, Sample


class __CLS__Params(Params):
    """The reward's params (``rewards[].params`` in a config); unknown keys are errors."""

    text: str = Field("</answer>", min_length=1, description="text the completion must contain")
    field: str | None = Field(
        None, description="dataset field whose value must appear instead of `text` (null: off)"
    )
    score: float = Field(1.0, description="score when the completion contains it")
    miss_score: float = Field(0.0, description="score when it does not")


class __CLS__:
    """Scores ``score`` when the completion contains the text, else ``miss_score``."""

    def __init__(self, params: __CLS__Params) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float | None:
        p = self.params
        target = p.text if p.field is None else str(sample.row[p.field]).strip()
        if not target:
            return None  # nothing to look for in this row: not applicable
        return p.score if target in sample.completion else p.miss_score


def _fields(params: __CLS__Params) -> tuple[str, ...]:
    """The dataset fields the reward reads: rlvr checks a dataset has them before training."""
    return (params.field,) if params.field else ()


@hookimpl
def rlvr_register_rewards(register):
    register(
        Reward(
            name="__NAME__",
            params=__CLS__Params,
            # A module-level class or function: reward workers import it by reference.
            factory=__CLS__,
            description="score when the completion contains a text (or a dataset field)",
            fields=_fields,
        )
    )
'''

_REWARD_TEST = '''\
"""Tests of the ``__NAME__`` reward plugin (with rlvr.testing)."""

from __future__ import annotations

import pytest
from rlvr.config import ConfigError
from rlvr.records import Sample
from rlvr.testing import check_reward, validate_config

import __MODULE__ as plugin

NAME = "__NAME__"


def test_follows_the_plugin_contract():
    # Found by name through the entry point, as a config finds it (so: installed).
    values = check_reward(NAME, params={"text": "72"})
    assert set(values) <= {0.0, 1.0} and 1.0 in values


def test_reads_a_dataset_field():
    samples = [
        Sample(completion="so it is 18", row={"answer": "18"}),
        Sample(completion="so it is 17", row={"answer": "18"}),
        Sample(completion="anything", row={"answer": ""}),
    ]
    values = check_reward(NAME, samples=samples, params={"field": "answer", "score": 2})
    assert values == [2.0, 0.0, None]


def test_scores():
    params = plugin.__CLS__Params(text="</answer>", miss_score=-1.0)
    reward = plugin.__CLS__(params)
    assert reward(Sample(completion="<answer>4</answer>")) == 1.0
    assert reward(Sample(completion="4")) == -1.0


def test_usable_in_a_config():
    config = validate_config({"rewards": [{"name": NAME, "params": {"text": "72"}}]})
    assert config.rewards[0].params.text == "72"
    with pytest.raises(ConfigError, match="texts"):
        validate_config({"rewards": [{"name": NAME, "params": {"texts": "72"}}]})
'''

# ----------------------------------------------------------------- algorithm

_ALGORITHM_README = """
```yaml
algorithm:
  name: __NAME__
  params: {baseline: median, epsilon: 0.2, beta: 0.0}
training:
  num_generations: 8      # completions per prompt: the baseline needs at least 2
```

Every setting of rlvr's clipped policy gradient (`epsilon`, `epsilon_high`, `beta`, `kl_kind`,
`loss_type`, `num_iterations`, `mask_truncated_completions`, `delta`) is a param too.
"""

_ALGORITHM_INIT = '''\
"""The ``__NAME__`` algorithm plugin for rlvr.

A policy gradient with a group baseline (mean or median).

After ``pip install -e .`` use it in any rlvr config::

    algorithm:
      name: __NAME__
      params: {baseline: median}

Registration is cheap on purpose (no torch here): ``rlvr plugins`` and ``rlvr validate``
import this module, while the algorithm itself (the ``algorithm`` module next to this one) is
imported by the factory when a run builds it. The object it builds follows
:class:`rlvr.protocols.AlgorithmImpl`; ``requirements(params)`` tells rlvr, before any model
loads, what the algorithm needs (a reference model, old log-probs, group size, ...).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field
from rlvr import hookimpl
from rlvr.plugins.algorithms.params import LossType, PolicyGradientParams
from rlvr.records import Algorithm, Requirements


class __CLS__Params(PolicyGradientParams):
    """The algorithm's params (``algorithm.params``): the shared clipped policy-gradient
    settings (``epsilon``, ``beta``, ``loss_type``, ``num_iterations``, ...) plus its own."""

    algorithm: ClassVar[str] = "__NAME__"
    #: a baseline from the other completions of the prompt needs at least two of them.
    min_group_size: ClassVar[int] = 2

    baseline: Literal["mean", "median"] = Field(
        "mean", description="subtract the group's mean or median reward"
    )
    scale: bool = Field(False, description="divide by the group's reward std (GRPO-style)")
    loss_type: LossType = Field("dapo", description="loss aggregation (dapo: token mean)")


def build(params: __CLS__Params, run: Any) -> Any:
    """The factory: imports torch and the algorithm only now."""
    from .algorithm import __CLS__

    return __CLS__(params, run)


def requirements(params: __CLS__Params) -> Requirements:
    """What a run must provide (checked by ``rlvr validate``; no torch)."""
    return params.requirements()


@hookimpl
def rlvr_register_algorithms(register):
    register(
        Algorithm(
            name="__NAME__",
            params=__CLS__Params,
            factory=build,
            description="policy gradient with a group mean or median baseline",
            requirements=requirements,
        )
    )
'''

_ALGORITHM_IMPL = '''\
"""The algorithm: rlvr's clipped policy gradient with its own advantages.

:class:`rlvr.plugins.algorithms.base.PolicyGradient` provides ``prepare`` (loss mask, reward
shaping hook, metrics) and ``loss`` (clipped surrogate, KL, aggregation) on top of
:mod:`rlvr.functional`; a subclass overrides what differs, here :meth:`advantages`.
"""

from __future__ import annotations

import torch
from rlvr import functional as F
from rlvr.plugins.algorithms.base import PolicyGradient


class __CLS__(PolicyGradient):
    def advantages(self, batch, rewards, mask, metrics):
        """``(advantages [N], returns None)``: reward minus the group's mean or median."""
        p = self.params
        if p.baseline == "mean":
            adv = F.group_advantages(rewards, batch.group_ids, scale="group" if p.scale else "none")
        else:
            _, index = torch.unique(batch.group_ids, return_inverse=True)
            baseline = torch.zeros_like(rewards)
            for g in range(int(index.max()) + 1 if len(index) else 0):
                members = index == g
                baseline[members] = rewards[members].median()
            adv = rewards - baseline
            if p.scale:
                adv = adv / (_group_std(rewards, index) + 1e-6)
        metrics["baseline_abs_adv"] = float(adv.abs().mean()) if len(adv) else 0.0
        return adv, None


def _group_std(rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Each sample's group reward std (Bessel-corrected; 0 for a group of one)."""
    out = torch.zeros_like(rewards)
    for g in range(int(index.max()) + 1 if len(index) else 0):
        members = index == g
        if int(members.sum()) > 1:
            out[members] = rewards[members].std()
    return out
'''

_ALGORITHM_TEST = '''\
"""Tests of the ``__NAME__`` algorithm plugin (with rlvr.testing)."""

from __future__ import annotations

import pytest
from rlvr.config import ConfigError
from rlvr.testing import check_algorithm, validate_config

NAME = "__NAME__"


@pytest.mark.parametrize(
    "params",
    [{}, {"baseline": "median"}, {"scale": True}, {"beta": 0.04}, {"num_iterations": 2}],
)
def test_follows_the_plugin_contract(params):
    # Found by name through the entry point, as a config finds it (so: installed).
    metrics = check_algorithm(NAME, params=params)
    assert "advantages/mean" in metrics


def test_median_baseline():
    import torch
    from rlvr.protocols import RunInfo
    from rlvr.testing import synthetic_batch

    import __MODULE__ as plugin

    params = plugin.__CLS__Params(baseline="median")
    algo = plugin.build(params, RunInfo(max_completion_length=8, num_generations=4))
    batch = synthetic_batch(params.requirements(), group_size=4)
    prepared, _ = algo.prepare(batch)
    for g in batch.group_ids.unique():
        members = batch.group_ids == g
        assert torch.allclose(
            prepared.advantages[members], batch.scores[members] - batch.scores[members].median()
        )


def test_usable_in_a_config():
    config = validate_config(
        {
            "algorithm": {"name": NAME, "params": {"baseline": "median"}},
            "training": {"num_generations": 4},
        }
    )
    assert config.algorithm.params.baseline == "median"
    with pytest.raises(ConfigError, match="num_generations"):
        validate_config({"algorithm": {"name": NAME}, "training": {"num_generations": 1}})
'''

# ----------------------------------------------------------------- backend

_BACKEND_README = """
```yaml
backend:
  name: __NAME__
  params: {chunk_size: 16}
```

It samples with the training model itself, token by token (no KV cache): slow, but short and
complete, and a starting point for wrapping another inference engine.
"""

_BACKEND_INIT = '''\
"""The ``__NAME__`` backend plugin for rlvr.

It samples with the training model, token by token.

After ``pip install -e .`` use it in any rlvr config::

    backend:
      name: __NAME__
      params: {chunk_size: 16}

The trainer builds the generator with ``factory(params, run, model, tokenizer)`` (``run`` is
an :class:`rlvr.protocols.RunInfo`) and calls ``generate(prompts, n, sampling)`` for token-id
prompts; it returns an :class:`rlvr.protocols.Generation` (completion ``i`` belongs to prompt
``i // n``). Registration is cheap on purpose (no torch here): the generator lives in
the ``generator`` module next to this one, imported by the factory.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from rlvr import hookimpl
from rlvr.records import Backend, Capabilities, Params


class __CLS__Params(Params):
    """The backend's params (``backend.params`` in a config); unknown keys are errors."""

    chunk_size: int | None = Field(
        None, ge=1, description="most sequences per forward pass (null: all at once)"
    )


def build(params: Any, run: Any, model: Any, tokenizer: Any) -> Any:
    """The factory: imports torch and the generator only now."""
    from .generator import __CLS__Generator

    return __CLS__Generator(params, run, model, tokenizer)


def available() -> str | None:
    """None when the backend can run here, else what is missing (``rlvr validate`` says it)."""
    return None


@hookimpl
def rlvr_register_backends(register):
    register(
        Backend(
            name="__NAME__",
            params=__CLS__Params,
            factory=build,
            description="token-by-token sampling with the training model (no KV cache)",
            # No sampler log-probs are returned; the trainer can compute reference log-probs.
            capabilities=Capabilities(sampler_logprobs=False, reference_logprobs=True),
            available=available,
        )
    )
'''

_BACKEND_IMPL = '''\
"""The backend's generator (see :class:`rlvr.protocols.Generator`)."""

from __future__ import annotations

from typing import Any

import torch
from rlvr.protocols import Generation, SamplingParams


class __CLS__Generator:
    """Samples ``n`` completions per prompt with ``model``'s forward pass, token by token.

    A completion ends after its first end-of-sequence token (kept in ``token_ids``); one that
    reaches ``max_tokens`` without it is ``truncated``. Supports temperature (0: greedy),
    top-k and top-p; ``sampling.seed`` makes a call reproducible.
    """

    def __init__(self, params: Any, run: Any, model: Any, tokenizer: Any) -> None:
        self.params = params
        self.model = model
        self.tokenizer = tokenizer
        eos = [tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)]
        self.eos = {
            int(i) for e in eos for i in (e if isinstance(e, list) else [e]) if i is not None
        }
        if not self.eos:
            raise ValueError("the tokenizer and model define no end-of-sequence token")
        pad = tokenizer.pad_token_id
        self.pad = int(pad) if pad is not None else min(self.eos)

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        if sampling.min_p > 0 or sampling.repetition_penalty != 1.0:
            raise ValueError("this backend supports neither min_p nor repetition_penalty")
        rows = [list(p) for p in prompts for _ in range(n)]
        device = next(self.model.parameters()).device
        rng = torch.Generator(device=device)
        if sampling.seed is not None:
            rng.manual_seed(sampling.seed)
        else:
            rng.seed()
        size = self.params.chunk_size or max(len(rows), 1)
        token_ids: list[list[int]] = []
        truncated: list[bool] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(rows), size):
                    for ids, cut in self._sample(rows[start : start + size], sampling, rng, device):
                        token_ids.append(ids)
                        truncated.append(cut)
        finally:
            self.model.train(was_training)
        texts = self.tokenizer.batch_decode(
            token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return Generation(token_ids=token_ids, texts=texts, truncated=truncated)

    def _sample(self, rows, sampling, rng, device):
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long, device=device)
        attention = torch.zeros_like(ids)
        for i, row in enumerate(rows):  # left padding: every row ends at the same column
            ids[i, width - len(row) :] = torch.tensor(row, device=device)
            attention[i, width - len(row) :] = 1
        out: list[list[int]] = [[] for _ in rows]
        done = [False] * len(rows)
        for _ in range(sampling.max_tokens):
            positions = (attention.cumsum(-1) - 1).clamp(min=0)
            logits = (
                self.model(input_ids=ids, attention_mask=attention, position_ids=positions)
                .logits[:, -1, :]
                .float()
            )
            nxt = self._pick(logits, sampling, rng)
            for i, token in enumerate(nxt.tolist()):
                if not done[i]:
                    out[i].append(token)
                    done[i] = token in self.eos
            if all(done):
                break
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            attention = torch.cat([attention, torch.ones_like(nxt)[:, None]], dim=1)
        return [(tokens, not finished) for tokens, finished in zip(out, done, strict=True)]

    @staticmethod
    def _pick(logits: torch.Tensor, sampling: SamplingParams, rng: torch.Generator) -> torch.Tensor:
        if sampling.temperature == 0:
            return logits.argmax(dim=-1)
        logits = logits / sampling.temperature
        if sampling.top_k > 0:
            kth = logits.topk(min(sampling.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if sampling.top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(dim=-1)
            drop = probs.cumsum(dim=-1) - probs > sampling.top_p  # keeps at least the top one
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
        probs = logits.softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=rng).squeeze(-1)

    def sync_weights(self, model: Any) -> None:
        """Sampling uses the training model itself: nothing to copy."""
        self.model = model

    def close(self) -> None:
        self.model = None
        self.tokenizer = None
'''

_BACKEND_TEST = '''\
"""Tests of the ``__NAME__`` backend plugin (with rlvr.testing)."""

from __future__ import annotations

import pytest
from rlvr.config import ConfigError
from rlvr.testing import check_backend, validate_config

NAME = "__NAME__"


@pytest.mark.parametrize("params", [{}, {"chunk_size": 2}])
def test_follows_the_plugin_contract(params):
    # Found by name through the entry point, as a config finds it (so: installed). It runs
    # the backend on a tiny random model built in a temporary directory.
    generation = check_backend(NAME, params=params)
    assert len(generation.token_ids) == len(generation.texts)


def test_usable_in_a_config():
    config = validate_config({"backend": {"name": NAME, "params": {"chunk_size": 4}}})
    assert config.backend.params.chunk_size == 4
    with pytest.raises(ConfigError, match="chunk_size"):
        validate_config({"backend": {"name": NAME, "params": {"chunk_size": 0}}})
'''

_TEMPLATES: dict[str, dict[str, str]] = {
    "reward": {"readme": _REWARD_README, "init": _REWARD_INIT, "test": _REWARD_TEST},
    "algorithm": {
        "readme": _ALGORITHM_README,
        "init": _ALGORITHM_INIT,
        "impl": _ALGORITHM_IMPL,
        "impl_name": "algorithm",
        "test": _ALGORITHM_TEST,
    },
    "backend": {
        "readme": _BACKEND_README,
        "init": _BACKEND_INIT,
        "impl": _BACKEND_IMPL,
        "impl_name": "generator",
        "test": _BACKEND_TEST,
    },
}

__all__ = ["KINDS", "ScaffoldError", "check_name", "class_name", "new_plugin", "render"]
