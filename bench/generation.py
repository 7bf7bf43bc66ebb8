"""Rollout throughput: the ``vllm`` backend against the ``hf`` backend on the same model.

Builds a random Qwen2 model offline (no download), samples the same prompts with the same
settings through both backends in one process, and prints generated tokens per second, the
vllm/hf ratio, and the mean time of the vllm generator's ``sync_weights``::

    python bench/generation.py                              # hidden 256, 4 layers
    python bench/generation.py --shape smollm2-135m         # 576 x 30 layers, vocab 49152
    python bench/generation.py --threads 1 2 --max-num-seqs 256 64 --kv-gb 2 0.5
    python bench/generation.py --shape smollm2-135m --dtype bfloat16   # a CPU with AVX512-BF16

``--threads`` sweeps torch's intra-op threads for both backends (no engine restart needed);
``--max-num-seqs`` and ``--kv-gb`` restart the engine per value (one engine per process at a
time). Each timing is the median of ``--repeats`` runs after one warm-up run. Completions stop
at the end-of-sequence token like in training (a random model rarely samples it), so tokens are
counted, not assumed.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHAPES = {
    # name: hidden, layers, heads, kv_heads, intermediate, vocab (None: the tokenizer's ~512)
    "tiny": (256, 4, 4, 4, 512, None),
    "smollm2-135m": (576, 30, 9, 3, 1536, 49152),
}


#: Words of the GSM8K-like questions :func:`make_prompts` writes.
NAMES = ("Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina")
ITEMS = ("clips", "apples", "books", "pencils", "cookies", "marbles", "stickers", "cards")


def build_model(out: Path, shape: str) -> Path:
    """A random-init Qwen2 of ``shape`` (head_dim 64) with rlvr's tiny tokenizer, float32."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from rlvr import build_tiny_model

    hidden, layers, heads, kv_heads, inter, vocab = SHAPES[shape]
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(out.parent / "tiny"))
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    config = Qwen2Config(
        vocab_size=vocab or len(tokenizer),
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=eos,
        pad_token_id=pad,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_prompts(tokenizer, count: int, seed: int = 0) -> list[list[int]]:
    """``count`` GSM8K-like prompts of varied length (the question shapes of the tiny
    tokenizer's corpus: arithmetic and two kinds of word problem), tokenized."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        kind = rng.randrange(3)
        if kind == 0:
            text = f"What is {a} {rng.choice('+-*')} {b}?"
        elif kind == 1:
            text = (
                f"{name} has {a} {item}. {name} buys {b} more {item}. How many {item} does "
                f"{name} have now?"
            )
        else:
            text = (
                f"{name} sold {a} {item} in April, and then {b} times as many in May. How many "
                f"did {name} sell in May?"
            )
        prompts.append(tokenizer(text)["input_ids"])
    return prompts


def timed(fn, repeats: int) -> tuple[float, int]:
    """(median seconds, tokens of the last run) after one warm-up call."""
    fn()
    times, tokens = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        tokens = sum(len(t) for t in out.token_ids)
    return statistics.median(times), tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sync-repeats", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=None,
        help="torch threads to try (default: the current setting)",
    )
    parser.add_argument("--max-num-seqs", type=int, nargs="+", default=[256])
    parser.add_argument("--kv-gb", type=float, nargs="+", default=[2.0])
    parser.add_argument(
        "--enforce-eager",
        choices=("true", "false", "auto"),
        nargs="+",
        default=["auto"],
        help="vllm's enforce_eager to try (auto: the backend's default, eager on CPU; false: "
        "torch.compile), one engine per value",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="compute dtype of both backends (the run's model.dtype; weights stay float32)",
    )
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument(
        "--unseeded", action="store_true", help="no sampling seed (the trainer always sets one)"
    )
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr import create_host
    from rlvr.plugin import RunInfo, SamplingParams

    backends = create_host().backends  # the installed hf and vllm backends, as a run finds them

    threads = args.threads or [torch.get_num_threads()]
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as tmp:
        path = build_model(Path(tmp) / "model", args.shape)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        n_params = sum(p.numel() for p in model.parameters())
        prompts = make_prompts(tokenizer, args.prompts)
        plen = [len(p) for p in prompts]
        sampling = SamplingParams(
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            seed=None if args.unseeded else 1,
        )
        run = RunInfo(
            max_completion_length=args.max_tokens,
            num_generations=args.n,
            max_prompt_length=max(plen),
            dtype=args.dtype,
        )
        cfg = model.config
        print(
            f"model: random Qwen2 '{args.shape}' hidden {cfg.hidden_size}, {cfg.num_hidden_layers} "
            f"layers, {cfg.num_attention_heads} heads (kv {cfg.num_key_value_heads}), head_dim "
            f"{cfg.head_dim}, vocab {cfg.vocab_size}, {n_params / 1e6:.1f}M params, float32 "
            f"weights computing in {args.dtype}, CPU"
        )
        print(
            f"workload: {len(prompts)} prompts (prompt tokens {min(plen)}-{max(plen)}) x "
            f"{args.n} samples x up to {args.max_tokens} tokens, temperature "
            f"{args.temperature}, {'unseeded' if args.unseeded else 'seeded'}; "
            f"{os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.1f}"
        )

        hf_rate: dict[int, float] = {}
        if not args.skip_hf:
            hf = backends["hf"].factory(backends["hf"].params(), run, model, tokenizer)
            for t in threads:
                torch.set_num_threads(t)
                secs, tokens = timed(lambda: hf.generate(prompts, args.n, sampling), args.repeats)
                hf_rate[t] = tokens / secs
                print(
                    f"hf    threads={t}: {tokens} tokens in {secs:.2f}s = {hf_rate[t]:,.0f} tok/s"
                )

        default_threads = torch.get_num_threads()
        engines = itertools.product(args.max_num_seqs, args.kv_gb, args.enforce_eager)
        for max_num_seqs, kv, eager in engines:
            torch.set_num_threads(default_threads)
            params = backends["vllm"].params(
                max_num_seqs=max_num_seqs,
                kv_cache_space_gb=kv,
                enforce_eager=None if eager == "auto" else eager == "true",
            )
            start = time.perf_counter()
            gen = backends["vllm"].factory(params, run, model, tokenizer)
            startup = time.perf_counter() - start
            try:
                for t in threads:
                    torch.set_num_threads(t)
                    secs, tokens = timed(
                        lambda gen=gen: gen.generate(prompts, args.n, sampling), args.repeats
                    )
                    rate = tokens / secs
                    ratio = f", {rate / hf_rate[t]:.2f}x hf" if t in hf_rate else ""
                    print(
                        f"vllm  threads={t} max_num_seqs={max_num_seqs} kv={kv}GiB "
                        f"enforce_eager={eager}: {tokens} "
                        f"tokens in {secs:.2f}s = {rate:,.0f} tok/s{ratio}"
                    )
                torch.set_num_threads(default_threads)
                sync = []
                for _ in range(args.sync_repeats):
                    start = time.perf_counter()
                    gen.sync_weights(model)
                    sync.append(time.perf_counter() - start)
                print(
                    f"vllm  engine start {startup:.1f}s; sync_weights mean "
                    f"{statistics.mean(sync) * 1e3:.0f} ms over {len(sync)} "
                    f"(min {min(sync) * 1e3:.0f}, max {max(sync) * 1e3:.0f})"
                )
            finally:
                gen.close()
                gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
