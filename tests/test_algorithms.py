"""Tests of the built-in algorithm plugins (grpo, dapo, dr_grpo, rloo, ppo).

The math itself is tested in test_functional.py; here: registration, params, requirements,
config cross-checks, and each algorithm's prepare/loss on synthetic rollouts with tiny models.
"""

from __future__ import annotations

import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError
from torch import nn

import rlvr.plugins.algorithms as algorithms
from rlvr.api.host import algorithm_problems, create_host
from rlvr.api.registration import Requirements
from rlvr.api.runtime import RolloutBatch, RunInfo
from rlvr.plugins.algorithms.params import (
    DAPOParams,
    DrGRPOParams,
    GRPOParams,
    PPOParams,
    RLOOParams,
)

NAMES = ["grpo", "dapo", "dr_grpo", "rloo", "ppo"]
VOCAB = 16
N, T, MCL = 8, 6, 10  # 2 prompts x 4 completions, padded width 6, max_completion_length 10


@pytest.fixture(scope="module")
def host():
    h = create_host()
    if not set(NAMES) <= set(h.algorithms):  # entry points not installed: load the module
        h = create_host(entrypoints=False, plugins=[algorithms])
    return h


def build(host, name, run=None, **params):
    record = host.algorithms[name]
    return record.factory(record.params(**params), run or RunInfo(MCL, 4))


# --------------------------------------------------------------------------- tiny models


class TableLM(nn.Module):
    """Independent logits for every (row, position): a step on one token moves no other."""

    def __init__(self, n=N, t=T, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.table = nn.Embedding(n * t, VOCAB)
        nn.init.normal_(self.table.weight, std=0.1)
        self.n, self.t = n, t

    def forward(self, ids, rows=None):
        rows = torch.arange(self.n) if rows is None else rows
        ctx = rows[:, None] * self.t + torch.arange(ids.shape[1])[None, :]
        return self.table(ctx).log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)


class TinyLM(nn.Module):
    """Embedding of the previous token + a position embedding, then a Linear to the vocab."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.tok = nn.Embedding(VOCAB, 8)
        self.pos = nn.Embedding(T, 8)
        self.head = nn.Linear(8, VOCAB)

    def forward(self, ids, rows=None):
        prev = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :-1]], dim=1)
        h = torch.tanh(self.tok(prev) + self.pos(torch.arange(ids.shape[1]))[None])
        return self.head(h).log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)


def make_batch(scores=None, lengths=None, truncated=None, groups=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.tensor(scores or [1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0])
    lengths = torch.tensor(lengths or [3, 6, 2, 5, 6, 4, 1, 6])
    n = len(scores)
    truncated = torch.tensor(truncated or [False, False, False, False, True, False, False, True])
    groups = torch.tensor(groups or [i // 4 for i in range(n)])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    ids = torch.randint(1, VOCAB, (n, T), generator=g) * mask
    return RolloutBatch(
        prompt_ids=torch.ones(n, 2, dtype=torch.long),
        prompt_mask=torch.ones(n, 2, dtype=torch.long),
        completion_ids=ids,
        completion_mask=mask,
        group_ids=groups,
        scores=scores,
        lengths=lengths,
        truncated=truncated,
    )


def fill(impl, batch, model, *, noise=0.0, values=None, seed=1):
    """What the trainer does before prepare: old/ref log-probs and old values as required."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        logp = model(batch.completion_ids)
    req = impl.params.requirements()
    if req.old_logprobs:
        batch.old_logp = logp + noise * torch.randn(logp.shape, generator=g)
    if req.reference_model:
        batch.ref_logp = logp + noise * torch.randn(logp.shape, generator=g)
    if req.value_model:
        batch.old_values = values if values is not None else 0.3 * torch.randn(N, T, generator=g)
    return batch


def counts(mask):
    return int(mask.sum()), int((mask.sum(dim=1) > 0).sum())


# --------------------------------------------------------------------------- registry


def test_registry_has_all_five(host):
    for name in NAMES:
        record = host.algorithms[name]
        assert record.description
        assert isinstance(record.requirements(record.params()), Requirements)
    assert host.algorithms["grpo"].params is GRPOParams
    assert host.algorithms["ppo"].params is PPOParams


def test_import_does_not_load_torch():
    code = (
        "import sys, rlvr.plugins.algorithms as a; "
        "out = []; a.rlvr_register_algorithms(register=out.append); "
        "assert len(out) == 10; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_factory_builds_impl(host):
    for name in NAMES:
        impl = build(host, name)
        assert impl.num_iterations == 1
        assert algorithm_problems(impl, host.algorithms[name].requirements(impl.params)) == []
    assert build(host, "dapo").max_generation_rounds == 4
    assert build(host, "grpo").max_generation_rounds == 1


# --------------------------------------------------------------------------- params


def test_defaults():
    assert (GRPOParams().beta, GRPOParams().aggregation) == (0.04, "seq-mean-token-mean")
    d = DAPOParams()
    assert (d.epsilon, d.eps_high, d.beta, d.aggregation) == (0.2, 0.28, 0.0, "token-mean")
    assert d.mask_truncated_completions and d.dynamic_sampling and d.overlong_penalty.enabled
    dr = DrGRPOParams()
    assert (dr.scale_rewards, dr.aggregation) == ("none", "seq-mean-token-sum-norm")
    assert RLOOParams().aggregation == "token-mean"
    p = PPOParams()
    assert (p.beta, p.kl_kind, p.gamma, p.lam, p.vf_coef, p.eps_high) == (
        0.05,
        "k1",
        1.0,
        0.95,
        0.1,
        0.2,
    )


@pytest.mark.parametrize("model", [GRPOParams, DAPOParams, DrGRPOParams, RLOOParams, PPOParams])
def test_unknown_key_rejected(model):
    with pytest.raises(ValidationError, match="betta"):
        model.model_validate({"betta": 0.1})


def test_trl_aliases():
    assert GRPOParams(scale_rewards=True).scale_rewards == "group"
    assert GRPOParams(scale_rewards=False).scale_rewards == "none"
    assert GRPOParams(loss_type="bnpo").aggregation == "token-mean"
    assert GRPOParams(loss_type="dr_grpo").aggregation == "seq-mean-token-sum-norm"
    assert GRPOParams(loss_type="seq-mean-token-sum").aggregation == "seq-mean-token-sum"
    p = PPOParams.model_validate(
        {"cliprange": 0.1, "kl_coef": 0.2, "num_ppo_epochs": 4, "kl_estimator": "k3"}
    )
    assert (p.epsilon, p.beta, p.num_iterations, p.kl_kind) == (0.1, 0.2, 4, "k3")
    assert GRPOParams.model_validate({"dual_clip": 3.0}).delta == 3.0
    with pytest.raises(ValidationError, match="same setting"):
        PPOParams.model_validate({"epsilon": 0.1, "cliprange": 0.2})
    with pytest.raises(ValidationError, match="scale_rewards"):
        GRPOParams(scale_rewards="std")
    with pytest.raises(ValidationError, match="delta"):
        DAPOParams(delta=1.2)  # not above 1 + epsilon_high = 1.28
    with pytest.raises(ValidationError):
        GRPOParams(num_iterations=0)


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("grpo", {}, Requirements(True, False, False, False, 2, "beta")),
        (
            "grpo",
            {"beta": 0.0, "num_iterations": 2},
            Requirements(False, False, True, False, 2, "beta"),
        ),
        ("dapo", {}, Requirements(False, False, False, False, 2, "beta")),
        ("dr_grpo", {}, Requirements(False, False, False, False, 2, "beta")),
        ("dr_grpo", {"beta": 0.01}, Requirements(True, False, False, False, 2, "beta")),
        ("rloo", {}, Requirements(False, False, False, False, 2, "beta")),
        ("ppo", {}, Requirements(True, True, True, False, 1, "beta")),
        ("ppo", {"beta": 0.0}, Requirements(False, True, True, False, 1, "beta")),
    ],
)
def test_requirements(host, name, params, expected):
    record = host.algorithms[name]
    assert record.requirements(record.params(**params)) == expected


# --------------------------------------------------------------------------- config checks


def config(name, params, *, max_completion_length=256, rewards=()):
    return SimpleNamespace(
        algorithm=SimpleNamespace(name=name, params=params),
        training=SimpleNamespace(
            num_generations=4, max_completion_length=max_completion_length, learning_rate=1e-6
        ),
        backend=SimpleNamespace(name="hf"),
        rewards=[SimpleNamespace(name=n, label=None, key=n) for n in rewards],
    )


def test_validate_config():
    check = algorithms.rlvr_validate_config
    assert check(config=config("grpo", GRPOParams())) == []
    assert check(config=config("dapo", DAPOParams())) == []
    assert check(config=SimpleNamespace()) == []  # no algorithm section
    assert check(config=config("other", GRPOParams())) == []
    too_long = DAPOParams(overlong_penalty={"max_length": 512})
    [(path, msg)] = check(config=config("dapo", too_long))
    assert path == "algorithm.params.overlong_penalty.max_length"
    assert "training.max_completion_length" in msg
    long_buffer = DAPOParams(overlong_penalty={"buffer": 300})
    [(path, _)] = check(config=config("dapo", long_buffer))
    assert path == "algorithm.params.overlong_penalty.buffer"
    off = DAPOParams(overlong_penalty={"enabled": False, "max_length": 512})
    assert check(config=config("dapo", off)) == []
    by_label = DAPOParams(filter_metric="accuracy")
    assert check(config=config("dapo", by_label, rewards=["accuracy", "format"])) == []
    [(path, msg)] = check(config=config("dapo", by_label, rewards=["format"]))
    assert path == "algorithm.params.filter_metric" and "format" in msg


# --------------------------------------------------------------------------- prepare + loss


@pytest.mark.parametrize("name", NAMES)
def test_one_step_follows_advantages(host, name):
    """Loss finite and differentiable; one SGD step moves every valid token's log-prob in the
    direction of its advantage (and leaves masked tokens alone)."""
    impl = build(host, name)
    model = TableLM()
    batch = fill(impl, make_batch(), model)
    batch, metrics = impl.prepare(batch)
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    mask = batch.loss_mask.bool()
    adv = batch.advantages if batch.advantages.dim() == 2 else batch.advantages[:, None]
    adv = adv.expand(N, T)
    assert (adv[mask] != 0).any()

    logp = model(batch.completion_ids)
    values = batch.old_values.clone().requires_grad_() if name == "ppo" else None
    out = impl.loss(
        batch, logp, values=values, num_tokens=counts(mask)[0], num_seqs=counts(mask)[1]
    )
    assert out.loss.dim() == 0 and torch.isfinite(out.loss)
    assert all(isinstance(v, float) and math.isfinite(v) for v in out.metrics.values())
    assert {"policy_loss", "clip_frac", "approx_kl"} <= set(out.metrics)
    out.loss.backward()
    assert model.table.weight.grad.abs().sum() > 0

    before = logp.detach()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    with torch.no_grad():
        delta = model(batch.completion_ids) - before
    moving = mask & (adv.abs() > 1e-6)
    assert torch.equal(torch.sign(delta[moving]), torch.sign(adv[moving]))
    assert torch.all(delta[~mask].abs() < 1e-7)  # padding and masked (truncated) rows


@pytest.mark.parametrize("name", NAMES)
def test_gradient_accumulation_matches_full_batch(host, name):
    impl = build(host, name, num_iterations=2) if name != "ppo" else build(host, name)
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
            values = value_param[rows] + 0.05 if name == "ppo" else None
            out = impl.loss(
                mb,
                model(mb.completion_ids),
                values=values,
                num_tokens=num_tokens,
                num_seqs=num_seqs,
            )
            out.loss.backward()
            total += float(out.loss.detach())
        return total, [p.grad.clone() if p.grad is not None else None for p in params]

    full, g_full = grads([torch.arange(N)])
    acc, g_acc = grads([torch.arange(0, 3), torch.arange(3, 5), torch.arange(5, N)])
    assert acc == pytest.approx(full, rel=1e-5, abs=1e-6)
    for a, b in zip(g_full, g_acc, strict=True):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_dr_grpo_normalises_by_max_completion_length(host):
    """With logp == old_logp the per-token loss is -A: loss = mean_i(-A_i * L_i) / MCL."""
    impl = build(host, "dr_grpo")
    batch, _ = impl.prepare(make_batch())
    logp = TableLM()(batch.completion_ids)
    out = impl.loss(batch, logp, num_tokens=0, num_seqs=N)
    lengths = batch.completion_mask.sum(dim=1).float()
    expected = (-batch.advantages * lengths).mean() / MCL
    torch.testing.assert_close(out.loss, expected)


def test_kl_needs_reference_logprobs(host):
    impl = build(host, "grpo")
    batch, _ = impl.prepare(make_batch())
    with pytest.raises(ValueError, match="ref_logp"):
        impl.loss(batch, TableLM()(batch.completion_ids), num_tokens=30, num_seqs=N)


def test_grpo_kl_term_added(host):
    impl = build(host, "grpo", beta=0.5)
    model = TableLM()
    batch = fill(impl, make_batch(), model, noise=0.5)
    batch, _ = impl.prepare(batch)
    logp = model(batch.completion_ids)
    out = impl.loss(batch, logp, num_tokens=30, num_seqs=N)
    no_kl = build(host, "grpo", beta=0.0).loss(batch, logp, num_tokens=30, num_seqs=N)
    assert out.metrics["kl"] > 0
    assert float(out.loss.detach()) > float(no_kl.loss.detach())


def test_dual_clip_caps_negative_advantages(host):
    """Ratio e^5 everywhere: A > 0 tokens are clipped at 1.2, A < 0 tokens capped at delta = 3."""
    impl = build(host, "grpo", beta=0.0, delta=3.0, loss_type="token-mean", num_iterations=2)
    batch = make_batch()
    batch.old_logp = torch.full((N, T), -5.0)
    batch, _ = impl.prepare(batch)
    num_tokens, num_seqs = counts(batch.completion_mask)
    out = impl.loss(batch, torch.zeros(N, T), num_tokens=num_tokens, num_seqs=num_seqs)
    a = batch.advantages[:, None].expand(N, T)
    per_token = torch.where(a > 0, -a * 1.2, -a * 3.0) * batch.completion_mask
    torch.testing.assert_close(out.loss, per_token.sum() / num_tokens)
    assert out.metrics["clip_frac_high"] > 0


def test_config_validation_end_to_end(host):
    from rlvr.config.schema import ConfigError, validate

    bad = {
        "algorithm": {"name": "dapo", "params": {"overlong_penalty": {"max_length": 512}}},
        "training": {"max_completion_length": 256},
    }
    with pytest.raises(ConfigError, match="overlong_penalty.max_length"):
        validate(bad, host)
    # TRL's GRPOConfig keys pasted into training: move to the algorithm's params
    trl = {"algorithm": {"name": "grpo"}, "training": {"beta": 0.0, "scale_rewards": False}}
    params = validate(trl, host).algorithm.params
    assert (params.beta, params.scale_rewards) == (0.0, "none")


# --------------------------------------------------------------------------- DAPO specifics


def test_dynamic_sampling_select(host):
    impl = build(host, "dapo")
    batch = make_batch(scores=[1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    keep = impl.select(batch)
    assert keep.tolist() == [False] * 4 + [True] * 4
    # on a reward label (NaN = not applicable counts as 0)
    batch.reward_components = {
        "acc": torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]),
        "fmt": torch.tensor([math.nan, 0.0, 0.0, 0.0, math.nan, 1.0, 1.0, 1.0]),
    }
    assert not build(host, "dapo", filter_metric="acc").select(batch).any()
    assert (
        build(host, "dapo", filter_metric="fmt").select(batch).tolist() == [False] * 4 + [True] * 4
    )
    with pytest.raises(KeyError, match="filter_metric"):
        build(host, "dapo", filter_metric="nope").select(batch)
    assert build(host, "dapo", dynamic_sampling=False).select(batch) is None
    for name in ("grpo", "dr_grpo", "rloo", "ppo"):
        assert build(host, name).select(batch) is None


def test_overlong_penalty_applied(host):
    # max_length 6, buffer 2: L <= 4 -> 0, L = 5 -> -0.5, L >= 6 -> -1 (times factor 0.5)
    params = {"overlong_penalty": {"max_length": 6, "buffer": 2, "factor": 0.5}}
    impl = build(host, "dapo", mask_truncated_completions=False, **params)
    batch = make_batch(scores=[1.0] * 8, lengths=[4, 5, 6, 6, 1, 2, 3, 4])
    prepared, metrics = impl.prepare(batch)
    # group 0 rewards [1, 0.75, 0.5, 0.5]: advantages follow the length; group 1 all equal
    assert prepared.advantages[0] > prepared.advantages[1] > prepared.advantages[2]
    assert prepared.advantages[2] == prepared.advantages[3]
    assert torch.all(prepared.advantages[4:] == 0)
    assert metrics["overlong_penalty/mean"] == pytest.approx(-(0.25 + 0.5 + 0.5) / 8)
    assert metrics["overlong_penalty/frac"] == pytest.approx(3 / 8)
    assert torch.equal(prepared.scores, batch.scores)  # the batch's scores are not modified
    off = build(host, "dapo", overlong_penalty={"enabled": False})
    assert torch.all(off.prepare(batch)[0].advantages == 0)
    # default: max_length = max_completion_length (10), buffer 20% of it (2)
    assert build(host, "dapo").overlong == (MCL, 2)


def test_truncation_masking(host):
    batch = make_batch()
    prepared, metrics = build(host, "dapo").prepare(batch)
    truncated = batch.truncated
    assert torch.all(prepared.loss_mask[truncated] == 0)
    assert torch.equal(prepared.loss_mask[~truncated], batch.completion_mask[~truncated])
    assert metrics["masked_frac"] == pytest.approx(2 / 8)
    kept, _ = build(host, "dapo", mask_truncated_completions=False).prepare(batch)
    assert torch.equal(kept.loss_mask, batch.completion_mask)
    grpo, _ = build(host, "grpo", mask_truncated_completions=True).prepare(batch)
    assert torch.all(grpo.loss_mask[truncated] == 0)


def test_group_advantages_wiring(host):
    batch = make_batch(scores=[1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])
    grpo, metrics = build(host, "grpo").prepare(batch)
    # group 0: mean 0.25, std (Bessel) 0.5 -> A_0 = 0.75 / 0.5 = 1.5
    assert float(grpo.advantages[0]) == pytest.approx(1.5, rel=1e-4)
    dr, _ = build(host, "dr_grpo").prepare(batch)
    assert float(dr.advantages[0]) == pytest.approx(0.75)
    rloo, _ = build(host, "rloo").prepare(batch)
    assert float(rloo.advantages[0]) == pytest.approx(1.0)  # 1 - mean(0, 0, 0)
    assert float(rloo.advantages[1]) == pytest.approx(-1 / 3)


# --------------------------------------------------------------------------- PPO


def test_ppo_token_rewards_and_gae(host):
    """gamma = lam = 1, V = 0, no KL, no whitening: every valid token's advantage is the score."""
    impl = build(host, "ppo", beta=0.0, lam=1.0, whiten_advantages=False)
    batch = make_batch()
    batch.old_logp = torch.zeros(N, T)
    batch.old_values = torch.zeros(N, T)
    prepared, _ = impl.prepare(batch)
    mask = batch.completion_mask.bool()
    expected = torch.where(mask, batch.scores[:, None].expand(N, T), 0.0)
    torch.testing.assert_close(prepared.advantages, expected)
    torch.testing.assert_close(prepared.returns, expected)


def test_ppo_kl_in_reward(host):
    impl = build(host, "ppo", beta=0.1, whiten_advantages=False, lam=1.0)
    batch = make_batch(scores=[0.0] * 8)
    batch.old_logp = torch.zeros(N, T)
    batch.ref_logp = torch.full((N, T), -1.0)  # k1 = 1 per token -> reward -0.1 per token
    batch.old_values = torch.zeros(N, T)
    prepared, metrics = impl.prepare(batch)
    assert metrics["kl/mean"] == pytest.approx(1.0)
    # A_t = sum of the remaining rewards = -0.1 * (tokens from t to the end)
    assert float(prepared.advantages[0, 0]) == pytest.approx(-0.3)
    assert float(prepared.advantages[0, 2]) == pytest.approx(-0.1)


def test_ppo_value_model_from_qwen2(host):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    policy = transformers.Qwen2ForCausalLM(cfg).eval()
    impl = build(host, "ppo", cliprange_value=100.0)  # let the fit go beyond old value +- 0.2
    assert impl.value_learning_rate is None
    assert build(host, "ppo", value_learning_rate=1e-5).value_learning_rate == 1e-5
    value_model = impl.build_value_model(policy)
    assert isinstance(value_model, nn.Module)

    batch = make_batch()
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1) % 128
    attn = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)
    values = value_model(ids, attn)
    assert values.shape == ids.shape and values.dtype == torch.float32
    assert torch.all(values == 0)  # zero-initialised head

    # the backbone is a copy: training the value model leaves the policy untouched
    shared = {id(p) for p in policy.parameters()} & {id(p) for p in value_model.parameters()}
    assert not shared
    before = {k: v.clone() for k, v in policy.state_dict().items()}

    # values of the completion tokens: the state before each token (positions P-1 .. P+T-2)
    def completion_values():
        full = value_model(ids, attn)
        return full[:, batch.prompt_ids.shape[1] - 1 : -1]

    with torch.no_grad():
        logits = policy(ids, attention_mask=attn).logits.float()
        logp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)[:, -T:]
    batch.old_logp = logp
    batch.ref_logp = logp.clone()
    with torch.no_grad():
        batch.old_values = completion_values()
    prepared, metrics = impl.prepare(batch)
    assert prepared.advantages.shape == (N, T) and prepared.returns.shape == (N, T)
    mask = prepared.loss_mask.bool()
    assert torch.all(prepared.advantages[~mask] == 0)
    assert abs(float(prepared.advantages[mask].mean())) < 1e-5  # whitened

    opt = torch.optim.Adam(value_model.parameters(), lr=3e-3)
    num_tokens, num_seqs = counts(prepared.loss_mask)
    losses = []
    for _ in range(8):
        out = impl.loss(
            prepared,
            logp.clone().requires_grad_(),
            values=completion_values(),
            num_tokens=num_tokens,
            num_seqs=num_seqs,
        )
        losses.append(out.metrics["value_loss"])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    assert losses[-1] < 0.5 * losses[0]
    for k, v in policy.state_dict().items():
        assert torch.equal(v, before[k])


def test_ppo_needs_values(host):
    impl = build(host, "ppo", beta=0.0)
    batch = make_batch()
    batch.old_logp = torch.zeros(N, T)
    with pytest.raises(ValueError, match="old_values"):
        impl.prepare(batch)
    batch.old_values = torch.zeros(N, T)
    prepared, _ = impl.prepare(batch)
    with pytest.raises(ValueError, match="values"):
        impl.loss(prepared, torch.zeros(N, T), num_tokens=30, num_seqs=N)
    with pytest.raises(NotImplementedError):
        build(host, "grpo").build_value_model(nn.Linear(2, 2))


def test_prepare_does_not_mutate(host):
    batch = make_batch()
    scores = batch.scores.clone()
    prepared, _ = build(host, "dapo").prepare(batch)
    assert batch.advantages is None and batch.loss_mask is None
    assert prepared is not batch and torch.equal(batch.scores, scores)


def test_importance_sampling_correction_needs_sampler_logprobs():
    from rlvr.config.schema import ConfigError, load_config

    data = {
        "algorithm": {"name": "grpo", "params": {"importance_sampling_correction": True}},
        "backend": {"name": "hf"},
    }
    with pytest.raises(ConfigError) as info:
        load_config(data, create_host())
    (path, message), *_ = info.value.problems
    assert path == "backend.name" and "log-probabilities" in message
    data["backend"]["name"] = "vllm"
    config = load_config(data, create_host())
    assert config.algorithm.params.importance_sampling_cap == 2.0
    # TRL's names are accepted as aliases.
    data["algorithm"]["params"] = {"vllm_importance_sampling_correction": True}
    assert load_config(data, create_host()).algorithm.params.importance_sampling_correction


def test_importance_weights_scale_the_policy_loss():
    from rlvr.algorithms.base import GroupRelative
    from rlvr.api.runtime import RunInfo
    from rlvr.plugins.algorithms.params import GroupParams

    run = RunInfo(max_completion_length=4, num_generations=2)
    logp = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]], requires_grad=True)
    batch = RolloutBatch(
        prompt_ids=torch.zeros(2, 1, dtype=torch.long),
        prompt_mask=torch.ones(2, 1),
        completion_ids=torch.zeros(2, 2, dtype=torch.long),
        completion_mask=torch.ones(2, 2),
        group_ids=torch.tensor([0, 0]),
        scores=torch.tensor([1.0, 0.0]),
        lengths=torch.tensor([2, 2]),
        truncated=torch.tensor([False, False]),
        # Sampler log-probs: ratio exp(0)=1 on row 0, exp(2) capped at 2 on row 1.
        sampler_logp=torch.tensor([[-1.0, -1.0], [-4.0, -4.0]]),
    )
    plain = GroupRelative(GroupParams(beta=0.0), run)
    corrected = GroupRelative(
        GroupParams(beta=0.0, importance_sampling_correction=True, importance_sampling_cap=2.0),
        run,
    )
    prepared, _ = plain.prepare(batch)
    loss_plain = plain.loss(prepared, logp, num_tokens=4, num_seqs=2)
    loss_tis = corrected.loss(prepared, logp, num_tokens=4, num_seqs=2)
    # Advantages are +a / -a; per-token loss -A: row 0 weight 1, row 1 weight 2.
    a = float(prepared.advantages[0])
    assert loss_plain.loss.item() == pytest.approx((-a + a) / 2)
    assert loss_tis.loss.item() == pytest.approx((-a * 1 + a * 2) / 2)
    assert loss_tis.metrics["importance_weight/mean"] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("name", "params", "skips"),
    [
        ("grpo", {"beta": 0.0}, True),
        ("dapo", {"overlong_penalty": {"enabled": False}}, True),  # else lengths shape rewards
        ("dr_grpo", {}, True),
        ("rloo", {}, True),
        ("cispo", {}, True),
        ("gspo", {}, True),
        ("grpo", {"beta": 0.04}, False),  # the KL term pulls on every row
        ("ppo", {"beta": 0.0}, False),  # the value loss trains on every row
        ("vapo", {}, False),
    ],
)
def test_inert_rows_are_the_groups_of_equal_scores(name, params, skips, host):
    """The update skips rows ``inert`` names; for the group-relative algorithms (no KL term)
    those are exactly the groups whose completions all scored the same (zero advantages)."""
    from rlvr.api.runtime import RunInfo
    from rlvr.testing import synthetic_batch

    record = host.algorithms[name]
    p = record.params.model_validate(params)
    req = record.requirements(p)
    impl = record.factory(p, RunInfo(max_completion_length=8, num_generations=4, max_steps=10))
    batch = synthetic_batch(req, group_size=4, max_completion_length=8)
    batch.step = 10
    prepared, _ = impl.prepare(batch)
    inert = impl.inert(prepared)
    if not skips:
        assert inert is None
        return
    equal = torch.tensor(
        [
            bool((batch.scores[batch.group_ids == g] == s).all())
            for g, s in zip(batch.group_ids.tolist(), batch.scores.tolist(), strict=True)
        ]
    )
    assert equal.any() and not equal.all()  # the synthetic batch has one such group
    assert torch.equal(inert, equal)
