"""The precision rule (:data:`rlvr.model.loading.TRAINED_DTYPE`): with a 16-bit ``model.dtype``
(bfloat16 is what ``auto`` picks on CUDA), the weights that train are float32, the passes
compute in the 16-bit dtype under autocast, and frozen copies stay 16-bit.

On CUDA this is the default path, and no GPU is here, so these tests ask for bfloat16 on the
CPU explicitly (slow matmuls on this CPU, but the model is tiny). The learning test is the
reason for the rule: at RL's usual learning rates AdamW's updates to bfloat16 weights round
away.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from test_trainer import dataset as dataset  # noqa: E402
from test_trainer import host as host  # noqa: E402
from test_trainer import make_config as make_config  # noqa: E402
from test_trainer import tiny_model as tiny_model  # noqa: E402

from rlvr.api.host import build_algorithm, build_generator  # noqa: E402
from rlvr.api.runtime import RunInfo, SamplingParams  # noqa: E402
from rlvr.config.schema import requirements  # noqa: E402
from rlvr.model.loading import autocast  # noqa: E402
from rlvr.outputs.checkpoint import latest_checkpoint  # noqa: E402
from rlvr.parallel import distributed  # noqa: E402
from rlvr.training.launch import train  # noqa: E402
from rlvr.training.models import RunModels, load_run_models  # noqa: E402

CPU = torch.device("cpu")
BF16 = {"dtype": "bfloat16"}


def load(config, host, algorithm=None) -> RunModels:
    return load_run_models(
        config.model,
        config.training,
        requirements(config, host),
        algorithm,
        distributed.current(),
        device=CPU,
        dtype=torch.bfloat16,
    )


def dtypes(model: torch.nn.Module, *, trained: bool) -> set[torch.dtype]:
    return {p.dtype for p in model.parameters() if p.requires_grad == trained}


def test_full_fine_tuning_trains_float32_weights_against_a_bfloat16_reference(make_config, host):
    models = load(make_config(algo_params={"beta": 0.04}, model=BF16), host)
    assert dtypes(models.policy, trained=True) == {torch.float32}
    assert dtypes(models.policy, trained=False) <= {torch.float32}
    ref = models.reference
    assert ref is not None
    # the reference is the policy's starting point as autocast computes with it: linear
    # layers rounded to bfloat16, embeddings and norms float32
    policy_w = dict(models.policy.named_parameters())
    linear = {
        f"{name}.{p}"
        for name, m in ref.named_modules()
        if isinstance(m, torch.nn.Linear)
        for p in ("weight", "bias")
    }
    kinds = set()
    for name, p in ref.named_parameters():
        dtype = torch.bfloat16 if name in linear else torch.float32
        kinds.add(dtype)
        assert torch.equal(p, policy_w[name].detach().to(dtype)), name
    assert kinds == {torch.bfloat16, torch.float32}

    # so at step 0 the reference computes exactly what the policy computes (the KL term has
    # no gradient until the policy moves)
    ids = torch.tensor([[5, 9, 11, 3, 7, 2]])
    with torch.no_grad(), autocast(CPU, torch.bfloat16):
        assert torch.equal(ref(ids).logits, models.policy(ids).logits)


def test_lora_keeps_the_frozen_base_in_bfloat16_and_trains_float32(make_config, host):
    config = make_config(
        algo_params={"beta": 0.04},
        model={**BF16, "lora": {"r": 4, "modules_to_save": ["norm"]}},
    )
    models = load(config, host)
    trained = {n for n, p in models.policy.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in trained)
    assert any("modules_to_save" in n for n in trained)  # peft would leave these bfloat16
    assert dtypes(models.policy, trained=True) == {torch.float32}
    assert dtypes(models.policy, trained=False) == {torch.bfloat16}
    assert models.reference is None and models.reference_is_base


def test_the_value_model_trains_in_float32(make_config, host):
    config = make_config(algorithm="ppo", model=BF16)
    run = RunInfo(max_completion_length=12, num_generations=4, dtype="bfloat16")
    record = host.algorithms["ppo"]
    algorithm = build_algorithm(record, config.algorithm.params, run, requirements(config, host))
    models = load(config, host, algorithm)
    assert models.value_model is not None
    assert dtypes(models.value_model, trained=True) == {torch.float32}


def test_autocast_computes_in_16_bit_only_when_asked():
    linear = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with autocast(CPU, torch.bfloat16):
        assert linear(x).dtype == torch.bfloat16
    with autocast("cpu", "bfloat16"):  # RunInfo.dtype is a name
        assert linear(x).dtype == torch.bfloat16
    with autocast(CPU, torch.float32):
        assert linear(x).dtype == torch.float32


def test_hf_generation_computes_in_the_run_dtype(make_config, host):
    """The hf backend samples with the training model itself: float32 weights, bfloat16
    matmuls (as the update's passes), not float32 ones."""
    config = make_config(model=BF16)
    models = load(config, host)
    seen: list[torch.dtype] = []
    hook = models.policy.lm_head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    run = RunInfo(max_completion_length=4, num_generations=2, dtype="bfloat16")
    hf = host.backends["hf"]
    params = hf.params()
    generator = build_generator(hf, params, run, models.policy, models.tokenizer)
    out = generator.generate([[1, 2, 3]], 2, SamplingParams(max_tokens=4, seed=0))
    hook.remove()
    assert len(out.token_ids) == 2
    assert seen and set(seen) == {torch.bfloat16}
    assert dtypes(models.policy, trained=True) == {torch.float32}


def test_bfloat16_training_moves_the_weights_at_small_learning_rates(make_config, host, tiny_model):
    """One GRPO step at 1e-6 in bfloat16 compute moves every weight of the policy (measured:
    100%). With bfloat16 weights, what ``dtype: bfloat16`` trained before this rule, the same
    step moved 2.4% of them: the rest of the update rounded away."""
    from safetensors.torch import load_file

    config = make_config(model=BF16, learning_rate=1e-6, max_steps=1, lr_scheduler_type="constant")
    train(config, host, progress=False)
    out = Path(config.training.output_dir)
    before = load_file(str(tiny_model / "model.safetensors"))
    after = load_file(str(latest_checkpoint(out) / "model.safetensors"))
    changed = sum(
        int((after[k] != before[k].to(after[k].dtype)).sum()) for k in after if k in before
    )
    total = sum(after[k].numel() for k in after if k in before)
    assert changed / total > 0.9, f"only {changed / total:.1%} of the weights moved"
    assert {t.dtype for t in after.values()} == {torch.float32}
