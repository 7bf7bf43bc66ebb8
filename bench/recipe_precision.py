"""The addition recipe's first updates in float32 and in bfloat16, on the same batches.

Why the recipe of docs/experiments/smollm2-reasoning-gym.md could learn in bfloat16 and collapse
in float32: this generates ``--steps`` rollouts once (the base policy, float32, hf generation,
the recipe's prompts, seed and sampling), then applies the recipe's GRPO updates (its learning
rate schedule, LoRA, clipping) to two copies of the model, one computing in float32 and one in
bfloat16 (forced, emulated on a CPU without AVX512-BF16: slow), on exactly those batches. Per
update it prints, side by side: the gradient norm, the norm of the LoRA weights' change, the
relative size of the merged change ``|scale * B @ A| / |W|`` (mean over adapted matrices), the
policy's change on the batch (mean |log p_after - log p_before| per completion token) and the
entropy before the update.

    python bench/recipe_precision.py --steps 10            # about 10 minutes on 2 AVX2 cores
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "examples" / "reasoning_gym_smollm2.yaml"


def _trainer(dtype: str, out: Path, overrides: list[str]) -> Any:
    from rlvr.api.host import create_host
    from rlvr.config.schema import load_config
    from rlvr.training.trainer import Trainer

    host = create_host()
    config = load_config(
        RECIPE,
        host,
        overrides=[
            f"model.dtype={dtype}",
            "backend.name=hf",
            "training.eval_steps=null",
            f"training.output_dir={out / dtype}",
            *overrides,
        ],
    )
    trainer = Trainer(config, host, progress=False)
    trainer.setup()
    trainer.update.old_logprobs = True  # fill_no_grad then measures the batch's log-probs
    return trainer


def _lora(model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]]:
    """(A, B, base W, scale) of every adapted linear layer."""
    found = []
    for module in model.modules():
        a, b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
        if a is None or b is None or "default" not in a:
            continue
        scale = module.scaling["default"]
        found.append((a["default"].weight, b["default"].weight, module.base_layer.weight, scale))
    return found


def _merged_change(model: torch.nn.Module) -> float:
    ratios = []
    with torch.no_grad():
        for a, b, w, scale in _lora(model):
            delta = scale * (b.float() @ a.float())
            ratios.append((delta.norm() / w.float().norm()).item())
    return sum(ratios) / len(ratios)


def _trained(trainer: Any) -> list[torch.Tensor]:
    return [p for g in trainer.update.optimizer.param_groups for p in g["params"]]


def _logp(trainer: Any, batch: Any) -> torch.Tensor:
    return trainer.update.fill_no_grad(batch).old_logp


def run(args: argparse.Namespace) -> None:
    from rlvr.rollout.runner import build_batch
    from rlvr.training.update import without_environment_tokens

    torch.set_num_threads(args.threads)
    out = Path(tempfile.mkdtemp(prefix="rlvr-precision-"))
    overrides = [f"training.seed={args.seed}"]
    f32 = _trainer("float32", out, overrides)
    rollouts = []
    for step in range(1, args.steps + 1):  # the base policy's samples: the same for both
        rollouts.append(f32.rollout_runner.run(step, f32.prompts_per_step, f32.max_steps))
        print(f"rollout {step}: reward {sum(c.score for c in rollouts[-1].generated) / 32:.3f}")
    bf16 = _trainer("bfloat16", out, overrides)
    rows: dict[str, list[dict[str, float]]] = {"float32": [], "bfloat16": []}
    for name, trainer in (("float32", f32), ("bfloat16", bf16)):
        before_params = [p.detach().clone() for p in _trained(trainer)]
        for step, ro in enumerate(rollouts, start=1):
            batch = build_batch(ro.kept, trainer.labels, trainer.pad_id, step)
            batch = batch.to(trainer.update.device)
            batch = trainer.update.fill_no_grad(batch)
            batch, _ = trainer.algo.prepare(batch)
            batch = without_environment_tokens(batch)
            old = batch.old_logp
            result = trainer.update.update(batch, first=True)
            new = _logp(trainer, batch)
            mask = batch.completion_mask.to(new.device).bool()
            change = (new - old).abs()[mask].mean().item()
            params = list(_trained(trainer))
            moved = math.sqrt(
                sum(
                    ((p.detach() - q) ** 2).sum().item()
                    for p, q in zip(params, before_params, strict=True)
                )
            )
            rows[name].append(
                {
                    "grad": result.grad_norm,
                    "lora": moved,
                    "merged": _merged_change(trainer.policy),
                    "logp": change,
                    "entropy": result.entropy or math.nan,
                    "lr": trainer.update.optimizer.param_groups[0]["lr"],
                }
            )
            print(name, step, {k: round(v, 6) for k, v in rows[name][-1].items()}, flush=True)
    print()
    print(
        "| update | lr | grad norm f32 / bf16 | LoRA change f32 / bf16 | merged |dW|/|W| f32 / "
        "bf16 | mean |dlog p| f32 / bf16 | entropy f32 / bf16 |"
    )
    print("|---|---|---|---|---|---|---|")
    for i, (a, b) in enumerate(zip(rows["float32"], rows["bfloat16"], strict=True), start=1):
        print(
            f"| {i} | {a['lr']:.2e} | {a['grad']:.3f} / {b['grad']:.3f} | {a['lora']:.4f} / "
            f"{b['lora']:.4f} | {a['merged']:.2e} / {b['merged']:.2e} | {a['logp']:.4f} / "
            f"{b['logp']:.4f} | {a['entropy']:.4f} / {b['entropy']:.4f} |"
        )
    for t in (f32, bf16):
        t.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
