"""The ``hf`` backend's shared prompt prefill against the unshared path, on the same inputs.

A GRPO step samples ``n`` completions of each prompt. Without sharing every one of the
``n * P`` rows runs its whole prompt through the model; with ``share_prompt_prefill`` (the
default) each distinct prompt runs once and its KV cache is copied to its rows. This script
times both in one process, alternating them, and prints them side by side::

    OMP_NUM_THREADS=1 python bench/prefix_sharing.py --small     # seconds: a smoke run
    OMP_NUM_THREADS=1 python bench/prefix_sharing.py             # SmolLM2-135M shapes
    python bench/prefix_sharing.py --model DIR --threads 2        # a local model directory

The default model is a random-weight Llama with SmolLM2-135M's shapes (576 x 30 layers, 9
heads, 3 KV heads, vocab 49152; no download) and rlvr's tiny tokenizer; the workload is the
issue's: 8 prompts of about 150 tokens (random ids, lengths 150 +- 10%, so rows are
left-padded) x 8 completions of up to 128 tokens, seeded sampling at temperature 1. A random
model rarely samples the end-of-sequence token, so most rows run the full 128 tokens; tokens
are counted, not assumed. Each timing is the median of ``--repeats`` runs after one warm-up
run of each path; wall and CPU seconds (this process, all threads; other jobs on a shared
machine disturb it less) are both printed. The "prompt pass" rows time ``max_tokens=1``:
almost all of it is reading the prompts, which is what sharing removes. The two paths must
give the same token ids (same seed); the script says whether they did.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
)

from rlvr import build_tiny_model, create_host  # noqa: E402
from rlvr.plugin import RunInfo, SamplingParams  # noqa: E402

#: name: hidden, layers, heads, kv_heads, intermediate, vocab
SHAPES = {
    "smollm2-135m": (576, 30, 9, 3, 1536, 49152),
    "small": (64, 2, 4, 2, 128, 512),
}


def build_model(out: Path, shape: str) -> Path:
    """A random-init Llama of ``shape`` with rlvr's tiny tokenizer, float32, saved to ``out``."""
    hidden, layers, heads, kv_heads, inter, vocab = SHAPES[shape]
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(out.parent / "tiny"))
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    config = LlamaConfig(
        vocab_size=max(vocab, len(tokenizer)),
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_prompts(count: int, tokens: int, vocab: int, avoid: set[int]) -> list[list[int]]:
    """``count`` prompts of random token ids, ``tokens`` +- 10% long (none of ``avoid``)."""
    rng = random.Random(0)
    ids = [i for i in range(vocab) if i not in avoid]
    spread = max(1, tokens // 10)
    return [
        [rng.choice(ids) for _ in range(rng.randint(tokens - spread, tokens + spread))]
        for _ in range(count)
    ]


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process, fn's result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a tiny model and workload")
    parser.add_argument("--model", help="a local model directory (default: random SmolLM2 shape)")
    parser.add_argument("--prompts", type=int, default=None, help="distinct prompts (8)")
    parser.add_argument("--n", type=int, default=None, help="completions per prompt (8)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="prompt length (150)")
    parser.add_argument("--max-tokens", type=int, default=None, help="completion tokens (128)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (as set)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    args = parser.parse_args(argv)
    small = {"prompts": 4, "n": 4, "prompt_tokens": 24, "max_tokens": 12}
    full = {"prompts": 8, "n": 8, "prompt_tokens": 150, "max_tokens": 128}
    for key, value in (small if args.small else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.threads:
        torch.set_num_threads(args.threads)

    backends = create_host().backends
    hf = backends["hf"]
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as tmp:
        shape = "small" if args.small else "smollm2-135m"
        path = Path(args.model) if args.model else build_model(Path(tmp) / "model", shape)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        cfg = model.config
        special = set(tokenizer.all_special_ids)
        prompts = make_prompts(args.prompts, args.prompt_tokens, cfg.vocab_size, special)
        plen = [len(p) for p in prompts]
        run = RunInfo(
            max_completion_length=args.max_tokens,
            num_generations=args.n,
            max_prompt_length=max(plen),
            dtype=args.dtype,
        )
        generators = {
            "unshared": hf.factory(hf.params(share_prompt_prefill=False), run, model, tokenizer),
            "shared": hf.factory(hf.params(share_prompt_prefill=True), run, model, tokenizer),
        }
        n_params = sum(p.numel() for p in model.parameters())
        print(
            f"model: {args.model or 'random Llama ' + shape} hidden {cfg.hidden_size}, "
            f"{cfg.num_hidden_layers} layers, {cfg.num_attention_heads} heads (kv "
            f"{cfg.num_key_value_heads}), vocab {cfg.vocab_size}, {n_params / 1e6:.1f}M params, "
            f"computing in {args.dtype}, {torch.get_num_threads()} torch threads, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
        )
        print(
            f"workload: {len(prompts)} prompts ({min(plen)}-{max(plen)} tokens) x {args.n} "
            f"completions x up to {args.max_tokens} tokens, temperature {args.temperature}, "
            f"seeded; median of {args.repeats} after a warm-up"
        )

        def measure(max_tokens: int) -> dict[str, dict[str, Any]]:
            sampling = SamplingParams(max_tokens=max_tokens, temperature=args.temperature, seed=1)
            results: dict[str, dict[str, Any]] = {
                name: {"wall": [], "cpu": []} for name in generators
            }
            for gen in generators.values():  # warm-up
                gen.generate(prompts, args.n, sampling)
            for _ in range(args.repeats):  # alternated, so load drifts hit both alike
                for name, gen in generators.items():
                    wall, cpu, out = timed(lambda gen=gen: gen.generate(prompts, args.n, sampling))
                    results[name]["wall"].append(wall)
                    results[name]["cpu"].append(cpu)
                    results[name]["out"] = out
            for r in results.values():
                r["wall"], r["cpu"] = statistics.median(r["wall"]), statistics.median(r["cpu"])
                r["tokens"] = sum(len(t) for t in r["out"].token_ids)
            return results

        whole = measure(args.max_tokens)
        prompt_pass = measure(1)
        old, new = whole["unshared"], whole["shared"]
        rows = [
            ("generate, wall s", old["wall"], new["wall"], "{:.2f}"),
            ("generate, CPU s", old["cpu"], new["cpu"], "{:.2f}"),
            (
                "tokens/s (wall)",
                old["tokens"] / old["wall"],
                new["tokens"] / new["wall"],
                "{:,.0f}",
            ),
            ("tokens/s (CPU)", old["tokens"] / old["cpu"], new["tokens"] / new["cpu"], "{:,.0f}"),
            (
                "prompt pass, wall s",
                prompt_pass["unshared"]["wall"],
                prompt_pass["shared"]["wall"],
                "{:.2f}",
            ),
            (
                "prompt pass, CPU s",
                prompt_pass["unshared"]["cpu"],
                prompt_pass["shared"]["cpu"],
                "{:.2f}",
            ),
        ]
        print(f"\n{'':24}{'unshared':>12}{'shared':>12}{'shared/unshared':>18}")
        for label, a, b, fmt in rows:
            print(f"{label:24}{fmt.format(a):>12}{fmt.format(b):>12}{b / a:>17.2f}x")
        decode_old = old["cpu"] - prompt_pass["unshared"]["cpu"]
        print(
            f"\ntokens generated: {old['tokens']} (unshared), {new['tokens']} (shared); "
            f"unshared CPU split: prompt pass {prompt_pass['unshared']['cpu']:.2f}s, "
            f"decode {decode_old:.2f}s"
        )
        same = old["out"].token_ids == new["out"].token_ids
        print(f"same token ids: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
