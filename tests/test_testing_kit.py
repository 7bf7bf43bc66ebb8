"""rlvr.testing: the conformance checks pass on every built-in plugin and fail, with a message
that says what to fix, on deliberately broken ones; the fixtures; the pytest entry point."""

# The fixtures of rlvr.testing are imported below (rlvr's pytest11 entry point provides them
# once installed); test arguments of the same names are what pytest matches them by.
# ruff: noqa: F811

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
from typing import Literal

import pytest
import torch
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

import rlvr
from rlvr.algorithms.base import GroupRelative
from rlvr.api.registration import (
    Algorithm,
    Backend,
    Capabilities,
    DataSource,
    Params,
    Reward,
    Sample,
)
from rlvr.api.runtime import Generation, LossOutput
from rlvr.config.schema import ConfigError
from rlvr.plugin import hookimpl
from rlvr.plugins.algorithms.params import GRPOParams
from rlvr.testing import (  # noqa: F401 - fixtures, used here before rlvr's pytest11 entry point
    ConformanceError,
    check_algorithm,
    check_backend,
    check_data_source,
    check_reward,
    rlvr_host,
    rlvr_host_factory,
    rlvr_tiny_model,
    validate_config,
)

# --------------------------------------------------------------------------- built-ins pass


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("format", None),
        ("format", {"reasoning_start": None, "reasoning_end": None, "tag_score": 0.1}),
        ("answer", None),
        ("numbers", {"position": "first"}),
        ("length_penalty", {"max_length": 100, "buffer": 20}),
        ("length_penalty", {"mode": "target", "target_length": 10, "tolerance": 5}),
    ],
)
def test_builtin_rewards_conform(name, params, rlvr_host):
    values = check_reward(name, params=params, host=rlvr_host)
    assert len(values) == 9
    assert all(v is None or math.isfinite(v) for v in values)


def test_builtin_reward_in_the_worker_pool(rlvr_host):
    assert check_reward("numbers", host=rlvr_host, workers=1)[:2] == [1.0, 0.0]


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("grpo", None),
        ("grpo", {"beta": 0.0, "num_iterations": 2, "delta": 3.0}),
        ("dapo", None),
        ("dapo", {"dynamic_sampling": False, "filter_metric": "check"}),
        ("dr_grpo", None),
        ("rloo", {"beta": 0.01}),
        ("ppo", None),
    ],
)
def test_builtin_algorithms_conform(name, params, rlvr_host):
    metrics = check_algorithm(name, params=params, host=rlvr_host)
    assert "advantages/mean" in metrics and "clip_frac" in metrics


def test_builtin_hf_backend_conforms(rlvr_host, rlvr_tiny_model):
    out = check_backend("hf", host=rlvr_host, model_dir=rlvr_tiny_model)
    assert len(out.token_ids) == 6 and out.logprobs is None
    out = check_backend("hf", {"batch_size": 2}, host=rlvr_host, model_dir=rlvr_tiny_model)
    assert len(out.texts) == 6


def test_unavailable_backend_is_skipped_or_fails(rlvr_host_factory):
    host = rlvr_host_factory([BrokenBackends()], entrypoints=False)
    with pytest.raises(pytest.skip.Exception, match="not available here: pip install it"):
        check_backend("unavailable", host=host)
    with pytest.raises(ConformanceError, match="not available here: pip install it"):
        check_backend("unavailable", host=host, skip_unavailable=False)


# --------------------------------------------------------------------------- broken rewards


class GoodParams(Params):
    flaw: Literal["none", "raises", "nan", "string", "bool", "empty", "build", "not_callable"] = (
        "none"
    )
    field: str | None = None


class Flawed:
    def __init__(self, params: GoodParams) -> None:
        if params.flaw == "build":
            raise RuntimeError("no model file")
        self.params = params

    def __call__(self, sample: Sample):
        flaw = self.params.flaw
        if flaw == "raises" and not sample.completion:
            raise IndexError("string index out of range")
        if flaw == "nan":
            return math.nan
        if flaw == "string":
            return "1.0"
        if flaw == "bool":
            return True
        return 0.5


def flawed_factory(params: GoodParams):
    return 42 if params.flaw == "not_callable" else Flawed(params)


class LooseParams(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ForbidButIgnoreUnknown(Params):
    """Says extra='forbid' but swallows unknown keys in a before-validator."""

    x: int = 1

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown(cls, data):
        return {k: v for k, v in data.items() if k in cls.model_fields}


class DriftingParams(Params):
    """Each validation appends a suffix: a dumped config never reloads to the same params."""

    tag: str = "a"

    @field_validator("tag")
    @classmethod
    def _suffix(cls, value: str) -> str:
        return value + "!"


class RequiredParams(Params):
    path: str


def reward(name="flawed", params=GoodParams, factory=flawed_factory, **kw) -> Reward:
    return Reward(name=name, params=params, factory=factory, description="test", **kw)


@pytest.mark.parametrize(
    ("record", "params", "message"),
    [
        (reward(), {"flaw": "raises"}, r"scoring samples\[3\] \(''\) raised IndexError"),
        (reward(), {"flaw": "nan"}, r"returned nan \(float\) for samples\[0\]"),
        (reward(), {"flaw": "string"}, r"returned '1.0' \(str\).*finite float, or None"),
        (reward(), {"flaw": "build"}, r"factory\(params\) raised RuntimeError: no model file"),
        (reward(), {"flaw": "not_callable"}, "returned 42, which is not callable"),
        (reward(), {"flaw": "typo"}, r"params \{'flaw': 'typo'\} are not valid for GoodParams"),
        (reward(), {"flw": "none"}, "are not valid"),
        (reward(factory=lambda p: Flawed(p)), None, "cannot be pickled.*module-level"),
        (reward(params=LooseParams), None, "params model must reject unknown keys"),
        (reward(params=ForbidButIgnoreUnknown), None, "accepts unknown keys"),
        (reward(params=DriftingParams), None, "changes in a JSON round trip"),
        (reward(params=RequiredParams), None, "defaults are not valid on their own: pass params"),
        (
            reward(fields=lambda p: ("tests",)),
            None,
            r"reads dataset fields \['tests'\] that the built-in samples lack",
        ),
        (reward(name="bad name"), None, "must be letters, digits"),
    ],
)
def test_broken_rewards_fail_clearly(record, params, message):
    with pytest.raises(ConformanceError, match=message):
        check_reward(record, params=params)


def test_reward_checks_custom_samples_and_fields():
    record = reward(fields=lambda p: ("tests",))
    samples = [Sample(completion="x", row={"tests": "assert True"})]
    assert check_reward(record, samples=samples) == [0.5]
    with pytest.raises(ConformanceError, match=r"samples\[0\].row lacks the fields \['tests'\]"):
        check_reward(record, samples=[Sample(completion="x")])
    assert check_reward(reward(), params={"flaw": "bool"})[0] == 1.0  # bools count as 0/1


def test_unknown_names_suggest(rlvr_host):
    with pytest.raises(ConformanceError, match="unknown reward 'fromat'; did you mean 'format'"):
        check_reward("fromat", host=rlvr_host)
    with pytest.raises(TypeError, match="takes an rlvr.api.registration.Reward or a reward name"):
        check_reward(Algorithm("x", GRPOParams, GroupRelative, "x"))


# --------------------------------------------------------------------------- broken algorithms


class FlawParams(GRPOParams):
    flaw: str = "none"


class FlawedAlgorithm(GroupRelative):
    def __init__(self, params, run):
        super().__init__(params, run)
        if params.flaw == "no_iterations":
            del self.num_iterations

    def advantages(self, batch, rewards, mask, metrics):
        flaw = self.params.flaw
        if flaw == "reads_ref":
            _ = batch.ref_logp.sum()  # never declared reference_model
        if flaw == "adv_nan":
            return torch.full_like(rewards, math.nan), None
        return super().advantages(batch, rewards, mask, metrics)

    def prepare(self, batch):
        if self.params.flaw == "adv_shape":
            return dataclasses.replace(batch, advantages=batch.scores[:2]), {}
        return super().prepare(batch)

    def inert(self, batch):
        if self.params.flaw == "inert_all":  # rows with nonzero advantages have a gradient
            return torch.ones(len(batch), dtype=torch.bool)
        if self.params.flaw == "inert_not_a_mask":
            return [True] * len(batch)
        return super().inert(batch)

    def loss(self, batch, logp, *, values=None, num_tokens, num_seqs):
        flaw = self.params.flaw
        mask = batch.loss_mask.bool()
        adv = batch.advantages[:, None]
        if flaw == "constant":
            return LossOutput(loss=torch.tensor(0.5))
        if flaw == "nan_loss":
            return LossOutput(loss=(logp * math.nan).sum())
        if flaw == "padding":
            return LossOutput(loss=-(adv * logp).sum() / num_tokens)
        if flaw == "local_norm":
            per_token = torch.where(mask, -adv * logp, 0.0)
            return LossOutput(loss=per_token.sum() / mask.sum())
        if flaw == "bad_metrics":
            out = super().loss(batch, logp, values=values, num_tokens=num_tokens, num_seqs=num_seqs)
            out.metrics["kl"] = math.inf
            return out
        if flaw == "not_a_loss":
            return 1.0
        return super().loss(batch, logp, values=values, num_tokens=num_tokens, num_seqs=num_seqs)


def algorithm(**kw) -> Algorithm:
    kw.setdefault("requirements", lambda p: p.requirements())
    return Algorithm(
        name="flawed", params=FlawParams, factory=FlawedAlgorithm, description="test", **kw
    )


def test_sound_algorithm_passes():
    metrics = check_algorithm(algorithm(), params={"beta": 0.0})
    assert math.isfinite(metrics["policy_loss"])


@pytest.mark.parametrize(
    ("flaw", "message"),
    [
        ("no_iterations", "FlawedAlgorithm lacks num_iterations"),
        ("reads_ref", r"prepare\(batch\).*only what its requirements ask for"),
        ("adv_shape", r"advantages of shape \[12\] or \[12, 8\], got \(2,\)"),
        ("adv_nan", "non-finite advantages"),
        ("constant", "does not depend on logp"),
        ("nan_loss", "non-finite loss"),
        ("padding", "padding positions"),
        ("local_norm", "micro-batch losses do not add up"),
        ("bad_metrics", "metric 'kl' = inf is not a finite number"),
        ("not_a_loss", "must return a LossOutput with a scalar loss"),
        ("inert_all", r"inert\(\) names rows \[0, 1, .*but the loss has a gradient w.r.t. logp"),
        ("inert_not_a_mask", r"inert\(\) must return None or a bool tensor of shape \[12\]"),
    ],
)
def test_broken_algorithms_fail_clearly(flaw, message):
    with pytest.raises(ConformanceError, match=message):
        check_algorithm(algorithm(), params={"flaw": flaw, "beta": 0.0})


def test_algorithm_requirements_must_be_requirements():
    with pytest.raises(ConformanceError, match="expected Requirements"):
        check_algorithm(algorithm(requirements=lambda p: {"reference_model": False}))


# --------------------------------------------------------------------------- broken backends


class FakeParams(Params):
    flaw: Literal[
        "none", "count", "no_eos", "texts", "logprobs", "layout", "after_eos", "too_long"
    ] = "none"


class FakeGenerator:
    """Completion = the prompt's last token, then EOS (so each group is identifiable)."""

    def __init__(self, params, run, model, tokenizer):
        self.flaw = params.flaw
        self.tokenizer = tokenizer
        self.eos = tokenizer.eos_token_id

    def generate(self, prompts, n, sampling):
        flaw = self.flaw
        ids = [[p[-1], self.eos] for p in prompts for _ in range(n)]
        truncated = [False] * len(ids)
        if flaw == "layout":  # prompt-major instead of group-major
            ids = [[p[-1], self.eos] for _ in range(n) for p in prompts]
        if flaw == "count":
            ids, truncated = ids[:-1], truncated[:-1]
        if flaw == "no_eos":
            ids = [x[:1] for x in ids]
        if flaw == "after_eos":
            ids = [[*x, 5] for x in ids]
        if flaw == "too_long":
            ids = [[5] * (sampling.max_tokens + 1) for _ in ids]
            truncated = [True] * len(ids)
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        if flaw == "texts":
            texts = [self.tokenizer.decode(x) for x in ids]  # special tokens left in
        logprobs = [[-0.5] * len(x) for x in ids] if flaw == "logprobs" else None
        return Generation(token_ids=ids, texts=texts, truncated=truncated, logprobs=logprobs)

    def sync_weights(self, model):
        pass

    def close(self):
        pass


class BrokenBackends:
    @hookimpl
    def rlvr_register_backends(self, register):
        register(Backend("fake", FakeParams, FakeGenerator, "test"))
        register(
            Backend(
                "unavailable", FakeParams, FakeGenerator, "test", available=lambda: "pip install it"
            )
        )
        register(
            Backend(
                "fake_logprobs",
                FakeParams,
                FakeGenerator,
                "test",
                capabilities=Capabilities(sampler_logprobs=True),
            )
        )


@pytest.fixture(scope="module")
def fake_host():
    from rlvr.api.host import create_host

    return create_host(entrypoints=False, plugins=[BrokenBackends()])


def test_sound_fake_backend_passes(fake_host, rlvr_tiny_model):
    out = check_backend("fake", host=fake_host, model_dir=rlvr_tiny_model)
    assert out.truncated == [False] * 6


@pytest.mark.parametrize(
    ("name", "flaw", "message"),
    [
        ("fake", "count", r"token_ids has 5 entries, expected 3 prompts x 2 = 6"),
        ("fake", "no_eos", "has no EOS token but is not flagged truncated"),
        ("fake", "after_eos", "goes on after an end-of-sequence token at position 1"),
        ("fake", "too_long", "has 7 tokens, expected 1 to max_tokens = 6"),
        ("fake", "texts", r"texts\[0\] = .* is not the decoded completion"),
        ("fake", "logprobs", "returns logprobs but does not declare"),
        ("fake", "layout", "greedy completions of prompt 0 differ"),
        ("fake_logprobs", "none", "sampler_logprobs is declared but logprobs is None"),
    ],
)
def test_broken_backends_fail_clearly(fake_host, rlvr_tiny_model, name, flaw, message):
    with pytest.raises(ConformanceError, match=message):
        check_backend(name, {"flaw": flaw}, host=fake_host, model_dir=rlvr_tiny_model)


# --------------------------------------------------------------------------- data sources


def test_builtin_data_sources_conform(rlvr_host, tmp_path):
    rows = [{"prompt": f"What is {a} + {a}?", "answer": str(2 * a)} for a in range(5)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # a local file is all its rows, whatever the split (so no held-out split to compare)
    got = check_data_source("file", {"path": str(path)}, splits=("train",), host=rlvr_host)
    assert got == {"train": rows}
    params = {"path": "json", "data_files": {"train": str(path), "test": str(path)}}
    with pytest.raises(ConformanceError, match="5 of the 5 prompts of split 'test' are also in"):
        check_data_source("datasets", params, host=rlvr_host)
    if importlib.util.find_spec("reasoning_gym") is not None:
        task = {"task": "basic_arithmetic", "train_size": 40, "eval_size": 10, "seed": 1}
        got = check_data_source("reasoning_gym", task, host=rlvr_host)
        assert got["train"] and got["test"]


class CountParams(Params):
    flaw: str = "none"
    count: int = 4


def rows_with_a_flaw(params: CountParams, split: str) -> list:
    """Rows of ``a + a``, the eval's apart from training's, unless ``params.flaw`` says."""
    import random

    if split not in ("train", "test"):
        if params.flaw == "split":
            raise KeyError(split)
        raise rlvr.RlvrError(f"no split {split!r}: there are 'train' and 'test'")
    start = 0 if split == "train" or params.flaw == "shared" else 100
    rows = [{"prompt": f"What is {a} + {a}?", "answer": str(2 * a)} for a in range(start, 104)]
    rows = rows[: params.count]
    if params.flaw == "random":
        random.shuffle(rows)
    if params.flaw == "strings":
        return [r["prompt"] for r in rows]
    if params.flaw == "field":
        return [{"question": r["prompt"]} for r in rows]
    if params.flaw == "number":
        return [{"prompt": 7} for _ in rows]
    if params.flaw == "raises":
        raise FileNotFoundError("rows.db")
    if params.flaw == "empty":
        return []
    return rows


SOURCE = DataSource("counts", CountParams, rows_with_a_flaw, "a + a, with a flaw to order")


@pytest.mark.parametrize(
    ("flaw", "message"),
    [
        ("random", r"split 'train' gave other rows when loaded again .*seed what is random"),
        ("strings", r"split 'train'\[0\] is a str, not a row"),
        ("field", r"field 'prompt' needed by the prompt .* is not in the dataset"),
        ("number", r"must hold text or a list of \{role, content\} messages"),
        ("raises", r"split 'train' raised FileNotFoundError: rows.db \(raise rlvr.RlvrError"),
        ("empty", r"split 'train' has no rows"),
        ("shared", r"4 of the 4 prompts of split 'test' are also in split 'train'"),
        ("split", r"an unknown split .* raised KeyError.*raise rlvr.RlvrError naming the splits"),
    ],
)
def test_broken_data_sources_fail_clearly(flaw, message):
    with pytest.raises(ConformanceError, match=message):
        check_data_source(SOURCE, {"flaw": flaw, "count": 4 if flaw != "random" else 50})


def test_a_sound_data_source_passes_and_returns_its_rows():
    got = check_data_source(SOURCE, {"count": 3})
    assert [r["answer"] for r in got["train"]] == ["0", "2", "4"]
    assert [r["answer"] for r in got["test"]] == ["200", "202", "204"]
    with pytest.raises(ConformanceError, match="not valid for CountParams"):
        check_data_source(SOURCE, {"cuont": 3})


# --------------------------------------------------------------------------- fixtures, config


class InProcess:
    @hookimpl
    def rlvr_register_rewards(self, register):
        register(reward(name="in_process"))


def test_fixtures(rlvr_host, rlvr_host_factory):
    assert {"format", "answer", "callable"} <= set(rlvr_host.rewards)
    alone = rlvr_host_factory([InProcess()], entrypoints=False)
    assert set(alone.rewards) == {"in_process"} and not alone.algorithms
    both = rlvr_host_factory([InProcess()])
    assert {"in_process", "format"} <= set(both.rewards) and both is not rlvr_host
    config = validate_config({"rewards": [{"name": "in_process"}]}, host=both)
    assert config.rewards[0].params == GoodParams()


def test_validate_config_reports_every_problem():
    with pytest.raises(ConfigError) as info:
        validate_config(
            {"rewards": [{"name": "fromat"}], "algorithm": {"name": "grpo", "params": {"bta": 1}}}
        )
    paths = [path for path, _ in info.value.problems]
    assert paths == ["rewards[0].name", "algorithm.params.bta"]
    config = validate_config({}, require=("algorithm", "backend"))
    assert (config.algorithm.name, config.backend.name) == ("grpo", "hf")


def test_loading_the_pytest_plugin_is_cheap():
    code = (
        "import sys, rlvr.testing\n"
        "heavy = {'torch', 'pydantic', 'transformers'} & set(sys.modules)\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_pytest_entry_point_registers_the_fixtures(tmp_path):
    """What rlvr's pyproject declares, ``[project.entry-points.pytest11] "rlvr.testing" =
    "rlvr.testing"``, faked with a dist-info: pytest then provides the fixtures to any test.
    The entry point is named after the module so that ``-p rlvr.testing`` or
    ``pytest_plugins = ["rlvr.testing"]`` on top of it is not a second registration (pluggy
    refuses one module under two names)."""
    (tmp_path / "test_uses_fixtures.py").write_text(
        textwrap.dedent(
            """
            def test_host(rlvr_host, rlvr_host_factory):
                assert "format" in rlvr_host.rewards
                assert not rlvr_host_factory(entrypoints=False).rewards
            """
        )
    )
    site = tmp_path / "site"
    info = site / "rlvr_pytest_fake-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlvr-pytest-fake\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nrlvr.testing = rlvr.testing\n")

    def pytest_run(*extra: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(site)}
        env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    for extra in ((), ("-p", "rlvr.testing")):
        result = pytest_run(*extra, "test_uses_fixtures.py")
        assert result.returncode == 0, result.stdout + result.stderr
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["rlvr.testing"]\n')
    result = pytest_run("test_uses_fixtures.py")
    assert result.returncode == 0, result.stdout + result.stderr
    result = pytest_run("-p", "no:rlvr.testing", "test_uses_fixtures.py")
    assert "fixture 'rlvr_host' not found" in result.stdout
