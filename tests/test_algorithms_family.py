"""Tests of the second round of built-in algorithms: gspo, cispo, reinforce_pp,
reinforce_pp_baseline and vapo (the math is tested in test_functional.py and against verl in
test_verl_reference.py; here: params, requirements, config checks, prepare/loss wiring).
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from torch import nn

import rlvr.functional as F
from rlvr.api.errors import ConfigWarning
from rlvr.api.registration import Requirements
from rlvr.plugins.algorithms.params import (
    CISPOParams,
    GRPOParams,
    GSPOParams,
    ReinforcePPBaselineParams,
    ReinforcePPParams,
    VAPOParams,
)

sys.path.insert(0, str(Path(__file__).parent))

from test_algorithms import N, T, TableLM, TinyLM, build, counts, fill, make_batch  # noqa: E402
from test_algorithms import host as host  # noqa: E402,F401  (the fixture)

NEW = ["gspo", "cispo", "reinforce_pp", "reinforce_pp_baseline", "vapo"]
#: VAPO's policy term starts after the value warm-up; these tests look at the policy.
TRAIN_NOW = {"vapo": {"value_warmup_steps": 0}}


def make(host, name, **params):
    return build(host, name, **{**TRAIN_NOW.get(name, {}), **params})


# --------------------------------------------------------------------------- params


def test_registered_with_descriptions(host):
    for name in NEW:
        record = host.algorithms[name]
        assert record.description and record.params.algorithm == name


def test_defaults():
    g = GSPOParams()
    assert (g.epsilon, g.eps_high, g.beta, g.aggregation, g.level) == (
        3e-4,
        4e-4,
        0.0,
        "seq-mean-token-mean",
        "sequence",
    )
    c = CISPOParams()
    assert (c.epsilon, c.eps_high, c.beta, c.aggregation) == (1.0, 0.28, 0.0, "token-mean")
    r = ReinforcePPParams()
    assert (r.beta, r.kl_kind, r.gamma, r.aggregation, r.epsilon) == (
        0.01,
        "k1",
        1.0,
        "token-mean",
        0.2,
    )
    b = ReinforcePPBaselineParams()
    assert (b.beta, b.kl_kind, b.aggregation) == (0.0, "k2", "token-mean")
    v = VAPOParams()
    assert (v.epsilon, v.eps_high, v.beta, v.aggregation, v.gamma) == (
        0.2,
        0.28,
        0.0,
        "token-mean",
        1.0,
    )
    assert (v.lam_critic, v.length_adaptive_alpha, v.positive_nll_coef) == (1.0, 0.05, 0.1)
    assert (v.value_warmup_steps, v.dynamic_sampling) == (50, False)


def test_level_for_grpo_and_dapo_with_trl_name():
    assert GRPOParams().level == "token"
    assert GRPOParams.model_validate({"importance_sampling_level": "sequence"}).level == "sequence"
    with pytest.raises(ValidationError, match="same setting"):
        GRPOParams.model_validate({"level": "token", "importance_sampling_level": "sequence"})
    with pytest.raises(ValidationError, match="not defined for level: sequence"):
        GSPOParams(delta=3.0)
    with pytest.raises(ValidationError, match="level"):
        CISPOParams(level="sequence")


def test_cispo_absolute_cap_is_explicit():
    assert CISPOParams(absolute_ratio_cap=5.0).eps_high == pytest.approx(4.0)
    assert CISPOParams(epsilon_high=0.5).eps_high == 0.5
    with pytest.raises(ValidationError, match="give only one"):
        CISPOParams(epsilon_high=0.5, absolute_ratio_cap=5.0)
    with pytest.raises(ValidationError, match="absolute_ratio_cap"):
        CISPOParams(absolute_ratio_cap=0.5)
    with pytest.raises(ValidationError, match="no dual clip"):
        CISPOParams(delta=3.0)


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("gspo", {}, Requirements(False, False, False, False, 2, "beta")),
        ("cispo", {}, Requirements(False, False, False, False, 2, "beta")),
        ("reinforce_pp", {}, Requirements(True, False, True, False, 1, "beta")),
        ("reinforce_pp", {"beta": 0.0}, Requirements(False, False, False, False, 1, "beta")),
        ("reinforce_pp_baseline", {}, Requirements(False, False, False, False, 2, "beta")),
        (
            "reinforce_pp_baseline",
            {"beta": 0.01},
            Requirements(True, False, False, False, 2, "beta"),
        ),
        ("vapo", {}, Requirements(False, True, False, False, 2, "beta")),
        ("vapo", {"beta": 0.01}, Requirements(True, True, True, False, 2, "beta")),
    ],
)
def test_requirements(host, name, params, expected):
    record = host.algorithms[name]
    assert record.requirements(record.params(**params)) == expected


# --------------------------------------------------------------------------- config checks


def _validate(host, algorithm, params=None, **training):
    from rlvr.config.schema import validate

    raw = {
        "rewards": [{"name": "answer"}, {"name": "format"}],
        "algorithm": {"name": algorithm, "params": params or {}},
        "training": {"num_generations": 4, "max_steps": 200, **training},
    }
    return validate(raw, host)


@pytest.mark.parametrize("name", ["gspo", "cispo", "reinforce_pp_baseline", "vapo"])
def test_group_size_rejected_before_loading(host, name):
    from rlvr.config.schema import ConfigError

    _validate(host, name)
    with pytest.raises(ConfigError, match=f"{name} compares completions.*num_generations >= 2"):
        _validate(host, name, num_generations=1)


def test_reinforce_pp_needs_no_group(host):
    assert _validate(host, "reinforce_pp", num_generations=1).algorithm.params.beta == 0.01


def test_vapo_config_checks(host):
    from rlvr.config.schema import ConfigError

    with pytest.raises(ConfigError, match="value_warmup_steps.*max_steps"):
        _validate(host, "vapo", max_steps=50)
    with pytest.raises(ConfigError, match="positive_metric.*labels: answer, format"):
        _validate(host, "vapo", {"positive_metric": "accuracy"})
    with pytest.raises(ConfigError, match="filter_metric"):
        _validate(host, "vapo", {"dynamic_sampling": True, "filter_metric": "accuracy"})
    ok = _validate(host, "vapo", {"positive_metric": "answer", "dynamic_sampling": True})
    assert ok.algorithm.params.positive_metric == "answer"


def test_vapo_warns_when_length_adaptive_lambda_is_zero_for_every_completion(host):
    # 0.05 * 8 tokens: lambda = 1 - 1/(alpha * length) <= 0 for every possible completion
    with pytest.warns(ConfigWarning) as caught:
        _validate(host, "vapo", max_completion_length=8)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("algorithm.params.length_adaptive_alpha: 0.05 x ")
    assert "length_adaptive_alpha: null" in message and "e.g. 2.5" in message
    with pytest.warns(ConfigWarning, match="lambda = 1 - 1/.* <= 0.2 "):
        _validate(host, "vapo", {"length_adaptive_alpha": 0.125}, max_completion_length=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # lambda reaches a useful value, or is fixed: no warning
        _validate(host, "vapo", max_completion_length=256)
        _validate(host, "vapo", {"length_adaptive_alpha": 1.0}, max_completion_length=8)
        _validate(host, "vapo", {"length_adaptive_alpha": None}, max_completion_length=8)


def test_rlvr_validate_cli_prints_the_vapo_lambda_warning(tmp_path, capsys, train_sections):
    from rlvr.cli.main import main

    config = tmp_path / "config.yaml"
    config.write_text(
        train_sections + "rewards: [{name: answer}]\nalgorithm: {name: vapo}\n"
        "training: {num_generations: 4, max_steps: 100, max_completion_length: 8}\n"
    )
    assert main(["validate", str(config)]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("warning: ")]
    assert len(lines) == 1 and "length_adaptive_alpha: null" in lines[0], lines


def test_rlvr_validate_cli_rejects_a_lone_completion_for_vapo(tmp_path, train_sections):
    config = tmp_path / "config.yaml"
    config.write_text(
        train_sections + "rewards: [{name: answer}]\nalgorithm: {name: vapo}\n"
        "training: {num_generations: 1, max_steps: 100}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr.cli.main", "validate", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "training.num_generations" in proc.stderr and "vapo" in proc.stderr


# --------------------------------------------------------------------------- prepare + loss


@pytest.mark.parametrize("name", NEW)
def test_one_step_follows_advantages(host, name):
    """Finite loss; one SGD step moves every valid token's log-prob the way of its advantage."""
    impl = make(host, name, **({"positive_nll_coef": 0.0} if name == "vapo" else {}))
    model = TableLM()
    batch = fill(impl, make_batch(), model)
    batch, metrics = impl.prepare(batch)
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    mask = batch.loss_mask.bool()
    adv = batch.advantages if batch.advantages.dim() == 2 else batch.advantages[:, None]
    adv = adv.expand(N, T)
    assert (adv[mask] != 0).any()
    logp = model(batch.completion_ids)
    values = batch.old_values.clone().requires_grad_() if name == "vapo" else None
    out = impl.loss(batch, logp, values=values, num_tokens=counts(mask)[0], num_seqs=N)
    assert torch.isfinite(out.loss)
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.metrics.values())
    assert {"policy_loss", "clip_frac", "approx_kl"} <= set(out.metrics)
    out.loss.backward()
    before = logp.detach()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    with torch.no_grad():
        delta = model(batch.completion_ids) - before
    moving = mask & (adv.abs() > 1e-6)
    assert torch.equal(torch.sign(delta[moving]), torch.sign(adv[moving]))
    assert torch.all(delta[~mask].abs() < 1e-7)


@pytest.mark.parametrize("name", NEW)
def test_gradient_accumulation_matches_full_batch(host, name):
    impl = make(host, name, num_iterations=2)
    torch.manual_seed(0)
    value_param = nn.Parameter(0.3 * torch.randn(N, T))
    model = TinyLM()
    batch = fill(impl, make_batch(), model, noise=0.3, values=value_param.detach().clone())
    batch, _ = impl.prepare(batch)
    num_tokens, num_seqs = counts(batch.loss_mask)
    params = [*model.parameters(), value_param]

    def grads(parts):
        for p in params:
            p.grad = None
        total = 0.0
        for rows in parts:
            mb = batch.index(rows)
            values = value_param[rows] + 0.05 if name == "vapo" else None
            out = impl.loss(
                mb,
                model(mb.completion_ids),
                values=values,
                num_tokens=num_tokens,
                num_seqs=num_seqs,
            )
            out.loss.backward()
            total += float(out.loss.detach())
        return total, [None if p.grad is None else p.grad.clone() for p in params]

    full, g_full = grads([torch.arange(N)])
    acc, g_acc = grads([torch.arange(0, 3), torch.arange(3, 5), torch.arange(5, N)])
    assert acc == pytest.approx(full, rel=1e-5, abs=1e-6)
    for a, b in zip(g_full, g_acc, strict=True):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def _prepared(host, name, **params):
    impl = make(host, name, **params)
    model = TableLM()
    batch = fill(impl, make_batch(), model, noise=0.2)
    batch, metrics = impl.prepare(batch)
    return impl, batch, model(batch.completion_ids), metrics


def test_gspo_is_grpo_at_sequence_level_with_its_metrics(host):
    impl, batch, logp, _ = _prepared(host, "gspo", num_iterations=2)  # old_logp != logp
    n_tok, n_seq = counts(batch.loss_mask)
    out = impl.loss(batch, logp, num_tokens=n_tok, num_seqs=n_seq)
    # bare keys: the trainer logs them as algo/gspo/seq_ratio_mean, ...
    assert {"seq_ratio_mean", "seq_ratio_min", "seq_ratio_max"} <= set(out.metrics)
    assert out.metrics["seq_ratio_min"] <= out.metrics["seq_ratio_max"]
    # grpo with level: sequence and GSPO's clip and beta computes the same loss
    grpo = make(
        host, "grpo", beta=0.0, epsilon=3e-4, epsilon_high=4e-4, level="sequence", num_iterations=2
    )
    same = grpo.loss(batch, logp, num_tokens=n_tok, num_seqs=n_seq)
    torch.testing.assert_close(out.loss, same.loss)
    assert "seq_ratio_mean" in same.metrics
    per_token, _ = F.policy_loss(
        logp,
        batch.old_logp,
        batch.advantages,
        batch.loss_mask,
        eps_low=3e-4,
        eps_high=4e-4,
        level="sequence",
    )
    torch.testing.assert_close(
        out.loss, F.aggregate(per_token, batch.loss_mask, "seq-mean-token-mean")
    )


def test_cispo_loss_uses_the_configured_bounds(host):
    for params, high in (({}, 0.28), ({"absolute_ratio_cap": 5.0}, 4.0)):
        impl, batch, logp, _ = _prepared(host, "cispo", **params)
        n_tok, n_seq = counts(batch.loss_mask)
        out = impl.loss(batch, logp, num_tokens=n_tok, num_seqs=n_seq)
        per_token, _ = F.cispo_loss(
            logp, logp.detach(), batch.advantages, batch.loss_mask, eps_low=1.0, eps_high=high
        )
        torch.testing.assert_close(out.loss, F.aggregate(per_token, batch.loss_mask, "token-mean"))


def test_reinforce_pp_puts_k1_in_the_reward(host):
    impl = make(host, "reinforce_pp", beta=0.1)
    batch = make_batch()
    batch.old_logp = torch.zeros(N, T)
    batch.ref_logp = torch.full((N, T), -1.0)  # k1 = 1 per token -> token reward -0.1
    prepared, metrics = impl.prepare(batch)
    assert metrics["kl/mean"] == pytest.approx(1.0)
    mask = batch.completion_mask
    last = mask.sum(dim=1) - 1
    token_rewards = -0.1 * mask.float()
    token_rewards[torch.arange(N), last] += batch.scores
    torch.testing.assert_close(prepared.advantages, F.reinforce_pp_advantages(token_rewards, mask))
    out = impl.loss(prepared, torch.zeros(N, T), num_tokens=30, num_seqs=N)
    assert "kl" not in out.metrics  # not in the loss


def test_reinforce_pp_baseline_kl_is_a_loss_term(host):
    with_kl, batch, logp, _ = _prepared(host, "reinforce_pp_baseline", beta=0.5)
    torch.testing.assert_close(
        batch.advantages,
        F.reinforce_pp_baseline_advantages(batch.scores, batch.group_ids, batch.loss_mask),
    )
    out = with_kl.loss(batch, logp, num_tokens=30, num_seqs=N)
    without = make(host, "reinforce_pp_baseline").loss(batch, logp, num_tokens=30, num_seqs=N)
    assert out.metrics["kl"] > 0 and float(out.loss.detach()) > float(without.loss.detach())


# --------------------------------------------------------------------------- VAPO


def test_vapo_decoupled_length_adaptive_gae(host):
    """V = 0, gamma = 1, no whitening. Length 4 with alpha 0.5: lam = 1 - 1/2 = 0.5, so
    A_t = 0.5^(3 - t) * score; the value targets use lam_critic = 1: the score on every token."""
    impl = make(host, "vapo", length_adaptive_alpha=0.5, whiten_advantages=False)
    batch = make_batch(lengths=[4] * 8)
    batch.old_values = torch.zeros(N, T)
    prepared, metrics = impl.prepare(batch)
    s = batch.scores[:, None]
    mask = batch.completion_mask.bool()
    expected_adv = torch.where(mask, s * torch.tensor([0.125, 0.25, 0.5, 1.0, 0, 0]), 0.0)
    torch.testing.assert_close(prepared.advantages, expected_adv)
    torch.testing.assert_close(prepared.returns, torch.where(mask, s.expand(N, T), 0.0))
    assert metrics["lam_actor_mean"] == pytest.approx(0.5)
    assert metrics["explained_variance"] == pytest.approx(0.0)  # V = 0 explains nothing


def test_vapo_positive_nll_term(host):
    impl, batch, logp, _ = _prepared(host, "vapo", positive_threshold=0.5)
    values = batch.old_values.clone().requires_grad_()
    n_tok, n_seq = counts(batch.loss_mask)
    out = impl.loss(batch, logp, values=values, num_tokens=n_tok, num_seqs=n_seq)
    off = make(host, "vapo", positive_nll_coef=0.0)
    off.prepare(batch)
    base = off.loss(batch, logp, values=values, num_tokens=n_tok, num_seqs=n_seq)
    positive = batch.scores >= 0.5  # scores [1, 0, 0, 1, 0.5, 0, 1, 0]
    nll = F.positive_nll(logp, batch.loss_mask, positive)
    torch.testing.assert_close(out.loss - base.loss, 0.1 * nll)
    assert out.metrics["positive_nll"] == pytest.approx(float(nll.detach()))


def test_vapo_value_warmup_trains_only_the_value_model_and_follows_the_step(host):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    impl = build(host, "vapo", value_warmup_steps=2)
    impl.build_value_model(transformers.Qwen2ForCausalLM(cfg))
    model = TableLM()
    progress = []
    for step in (1, 2, 3):
        batch = dataclasses.replace(fill(impl, make_batch(seed=step), model), step=step)
        batch, metrics = impl.prepare(batch)
        progress.append(metrics["warmup_progress"])
        model.zero_grad()
        values = torch.zeros(N, T, requires_grad=True)
        out = impl.loss(
            batch, model(batch.completion_ids), values=values, num_tokens=30, num_seqs=N
        )
        out.loss.backward()
        assert values.grad is not None and values.grad.abs().sum() > 0
        policy_grad = model.table.weight.grad
        if step <= 2:  # warm-up: the policy gets no gradient at all (the optimizer skips it)
            assert policy_grad is None and metrics["value_only_step"] == 1.0
            assert "policy_loss" not in out.metrics
        else:
            assert policy_grad is not None and policy_grad.abs().sum() > 0
            assert metrics["value_only_step"] == 0.0
    assert progress == [0.5, 1.0, 1.0]
    # The warm-up depends on the batch's step only: a freshly built algorithm (as after
    # --resume) handed step 2 still warms up, handed step 3 trains the policy; outside
    # training (step 0) the policy trains too.
    resumed = build(host, "vapo", value_warmup_steps=2)
    for step, value_only in ((2, 1.0), (3, 0.0), (0, 0.0)):
        batch = dataclasses.replace(fill(resumed, make_batch(), model), step=step)
        assert resumed.prepare(batch)[1]["value_only_step"] == value_only
        assert resumed.warming_up(batch) == bool(value_only)


def test_vapo_dynamic_sampling_is_optional(host):
    batch = make_batch(scores=[1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    assert make(host, "vapo").select(batch) is None
    impl = make(host, "vapo", dynamic_sampling=True, max_generation_rounds=3)
    assert impl.max_generation_rounds == 3
    assert impl.select(batch).tolist() == [False] * 4 + [True] * 4


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("gspo", None),
        ("gspo", {"num_iterations": 2}),
        ("grpo", {"level": "sequence", "beta": 0.0, "num_iterations": 2}),
        ("cispo", None),
        ("cispo", {"absolute_ratio_cap": 5.0, "num_iterations": 2}),
        ("reinforce_pp", None),
        ("reinforce_pp_baseline", {"beta": 0.01}),
        ("vapo", None),
        ("vapo", {"value_warmup_steps": 0}),
        ("vapo", {"value_warmup_steps": 0, "dynamic_sampling": True, "beta": 0.01}),
    ],
)
def test_conform_to_the_plugin_kit(name, params, rlvr_host):
    """rlvr.testing.check_algorithm: finite, differentiable loss that splits into micro-batches,
    at the run's first step (VAPO's defaults: a value-only warm-up step) and its last."""
    from rlvr.testing import check_algorithm

    metrics = check_algorithm(name, params=params, host=rlvr_host)
    assert "advantages/mean" in metrics and "clip_frac" in metrics


def test_the_plugin_kit_says_when_a_warmup_outlasts_the_run(rlvr_host):
    from rlvr.api.runtime import RunInfo
    from rlvr.testing import ConformanceError, check_algorithm

    run = RunInfo(max_completion_length=8, num_generations=4, max_steps=10)
    with pytest.raises(ConformanceError, match=r"no policy gradient\) at step 1 or 10 .*only the"):
        check_algorithm("vapo", host=rlvr_host, run=run)  # 50 warm-up steps
    assert check_algorithm("vapo", {"value_warmup_steps": 9}, host=rlvr_host, run=run)
