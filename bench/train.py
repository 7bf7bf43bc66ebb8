"""Training cost: seconds per step and peak memory of a fixed small run, per algorithm; and the
memory/time of rlvr's chunked log-probabilities against a naive full-vocabulary log_softmax.

    python bench/train.py                       # both parts, defaults below
    python bench/train.py --part train --steps 6
    python bench/train.py --part logprobs --vocab 49152
    python bench/train.py --threads 1           # on a machine other jobs keep busy

Part 1 (``train``): a random tiny Qwen2 (:func:`rlvr.build_tiny_model`, hidden 256,
4 layers, head_dim 64), 8 prompts x 8 completions of up to 64 tokens per step (the ``hf``
backend; completions stop at the end-of-sequence token as in training, which the random model
rarely samples, so nearly all reach 64 tokens: the mean length is printed), one optimizer
update per step, for ``grpo`` with ``beta=0`` (no reference model), ``grpo`` with
``beta=0.04`` (a reference model and its forward pass), and ``dapo`` (dynamic sampling never
triggers: the bench reward differs across every completion; ``mask_truncated_completions`` is
off so every algorithm trains on the same tokens). Each configuration runs in a fresh process,
so the peak RSS is its own; seconds per step (wall, and CPU seconds of all threads, which
other processes on the machine disturb less) are the median of the steps after the first.

Part 2 (``logprobs``): one forward + backward of the per-token log-probabilities of N
completions of T tokens after P prompt tokens, on a model with a realistic vocabulary
(``--vocab``, SmolLM2's 49152 by default), three ways, each in a fresh process:

- ``naive``: ``model(ids).logits`` for every position, then a float32
  ``log_softmax(-1).gather(...)`` (what a straightforward implementation does);
- ``naive+keep``: the same, but only the last ``T + 1`` positions' logits
  (``logits_to_keep``), which isolates the effect of the chunked normalisation;
- ``rlvr unfused``: :func:`rlvr.completion_logprobs` with ``fuse_head=False``
  (``logits_to_keep`` plus a chunked custom autograd function that never materialises a
  float32 ``[N, T, V]`` tensor; the model's own ``[N, T + 1, V]`` logits and their gradient
  still exist);
- ``rlvr``: :func:`rlvr.completion_logprobs` as trained (the head fused into the
  chunked function: no logits tensor of the batch at all).

Peak memory is the process's peak RSS above its RSS just before the pass (the model and
inputs already built). The printed max |difference| checks that the three agree.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONFIGS = {
    "grpo beta=0": ("grpo", {"beta": 0.0}),
    "grpo beta=0.04": ("grpo", {"beta": 0.04}),
    "dapo": ("dapo", {"mask_truncated_completions": False}),
}


def rss_mb() -> float:
    """Current resident set size (MiB), from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- part 1: training


def _bench_reward(sample) -> float:
    """A cheap reward that differs across completions (character hash in [0, 1))."""
    return (sum(map(ord, sample.completion)) % 997) / 997


def bench_reward_factory(params):
    return _bench_reward


def _host():
    from rlvr import create_host
    from rlvr.plugin import Params, Reward, hookimpl

    class BenchPlugin:
        @hookimpl
        def rlvr_register_rewards(self, register):
            register(
                Reward(
                    name="bench",
                    params=Params,
                    factory=bench_reward_factory,
                    description="character hash",
                )
            )

    return create_host(plugins=[BenchPlugin()])


def child_train(spec: dict) -> dict:
    import rlvr

    host = _host()
    raw = {
        "model": {"name_or_path": spec["model"]},
        "data": {"path": spec["data"]},
        "rewards": [{"name": "bench"}],
        "algorithm": {"name": spec["algorithm"], "params": spec["params"]},
        "backend": {"name": "hf"},
        "training": {
            "output_dir": spec["output_dir"],
            "max_steps": spec["steps"],
            "per_device_train_batch_size": spec["prompts"],
            "num_generations": spec["generations"],
            "max_completion_length": spec["tokens"],
            "max_prompt_length": 64,
            "learning_rate": 1e-5,
            "reward_workers": 0,
            "save_steps": 10_000,
            "seed": 0,
        },
    }
    config = rlvr.load_config(
        raw, host, require=("model", "data", "rewards", "algorithm", "backend")
    )
    t0 = time.perf_counter()
    rlvr.train(config, progress=False, host=host)
    total = time.perf_counter() - t0
    lines = rlvr.read_metrics(spec["output_dir"])
    later = lines[1:] or lines

    def med(key: str) -> float:
        return statistics.median(m[key] for m in later)

    return {
        "step_time": med("step_time"),
        "cpu_time": med("cpu_time"),  # CPU seconds of all threads: less disturbed by other jobs
        "generation_time": med("generation_time"),
        "training_time": med("training_time"),
        "tokens_per_second": med("tokens_per_second"),
        "completion_length": med("completion_length/mean"),
        "peak_memory_mb": max(m["peak_memory_mb"] for m in lines),
        "total_time": total,
    }


def part_train(args: argparse.Namespace) -> None:
    from rlvr import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model(
            root / "model", hidden_size=args.hidden, num_layers=args.layers, head_dim=64
        )
        n_params = _count_params(model)
        data = root / "data.jsonl"
        data.write_text(
            "".join(
                json.dumps({"prompt": f"What is {a} + {b}? Think step by step."}) + "\n"
                for a in range(8)
                for b in range(8)
            )
        )
        print(
            f"\n## Training step: tiny Qwen2 hidden {args.hidden}, {args.layers} layers "
            f"({n_params / 1e6:.1f}M params), {args.prompts} prompts x {args.generations} "
            f"completions x {args.tokens} tokens, hf backend, float32, "
            f"{_threads()} threads; median of steps 2..{args.steps}\n"
        )
        print(
            "| config | s/step | CPU s/step | generation s | training s | tokens/s | mean len "
            "| peak RSS MiB |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, (algorithm, params) in CONFIGS.items():
            spec = {
                "model": str(model),
                "data": str(data),
                "algorithm": algorithm,
                "params": params,
                "output_dir": str(root / name.replace(" ", "_").replace("=", "")),
                "steps": args.steps,
                "prompts": args.prompts,
                "generations": args.generations,
                "tokens": args.tokens,
            }
            r = _run_child(["--child-train", json.dumps(spec)], args.threads)
            print(
                f"| {name} | {r['step_time']:.2f} | {r['cpu_time']:.2f} | "
                f"{r['generation_time']:.2f} | "
                f"{r['training_time']:.2f} | {r['tokens_per_second']:.0f} | "
                f"{r['completion_length']:.1f} | {r['peak_memory_mb']:.0f} |",
                flush=True,
            )


def _count_params(model_dir: Path) -> int:
    import math

    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118


# --------------------------------------------------------------------------- part 2: logprobs


def _logprob_model(vocab: int, hidden: int, layers: int, dtype: str = "float32"):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        head_dim=64,
        tie_word_embeddings=True,
        use_sliding_window=False,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(getattr(torch, dtype)).train()


def child_logprobs(spec: dict) -> dict:
    import torch

    from rlvr import completion_logprobs

    n, p, t, vocab = spec["n"], spec["prompt"], spec["tokens"], spec["vocab"]
    model = _logprob_model(vocab, spec["hidden"], spec["layers"], spec["dtype"])
    g = torch.Generator().manual_seed(1)
    prompt_ids = torch.randint(0, vocab, (n, p), generator=g)
    completion_ids = torch.randint(0, vocab, (n, t), generator=g)
    prompt_mask = torch.ones(n, p, dtype=torch.long)
    completion_mask = torch.ones(n, t, dtype=torch.long)
    variant = spec["variant"]

    def once() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        if variant.startswith("rlvr"):
            logp, _ = completion_logprobs(
                model,
                prompt_ids,
                prompt_mask,
                completion_ids,
                completion_mask,
                fuse_head=variant == "rlvr",
            )
        else:
            ids = torch.cat([prompt_ids, completion_ids], 1)
            mask = torch.cat([prompt_mask, completion_mask], 1)
            kwargs = {"logits_to_keep": t + 1} if variant == "naive+keep" else {}
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False, **kwargs).logits
            logits = logits[:, -t - 1 : -1]
            logp = logits.float().log_softmax(-1).gather(-1, completion_ids[..., None])[..., 0]
        logp.mean().backward()
        return logp.detach()

    base = rss_mb()
    times = []
    for _ in range(spec["repeats"]):
        t0 = time.process_time()  # CPU seconds: less disturbed by other jobs than wall time
        logp = once()
        times.append(time.process_time() - t0)
    torch.save(logp, spec["out"])
    return {"time": statistics.median(times), "peak_mb": peak_rss_mb() - base}


def part_logprobs(args: argparse.Namespace) -> None:
    import torch

    n = args.prompts * args.generations
    print(
        f"\n## Log-probabilities, forward + backward: N={n} completions x T={args.tokens} tokens "
        f"after P={args.prompt_tokens} prompt tokens, vocab {args.vocab}, hidden {args.hidden}, "
        f"{args.layers} layers, {args.dtype}, {_threads()} threads; median of {args.repeats}\n"
    )
    full = n * (args.prompt_tokens + args.tokens) * args.vocab * 4 / 2**20
    print(
        f"(one float32 [N, P+T, V] tensor is {full:.0f} MiB; [N, T+1, V] is "
        f"{n * (args.tokens + 1) * args.vocab * 4 / 2**20:.0f} MiB)\n"
    )
    print("| method | CPU seconds | peak memory above baseline, MiB | max abs diff vs the first |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for variant in args.variants.split(","):
            spec = {
                "variant": variant,
                "n": n,
                "prompt": args.prompt_tokens,
                "tokens": args.tokens,
                "vocab": args.vocab,
                "hidden": args.hidden,
                "layers": args.layers,
                "repeats": args.repeats,
                "dtype": args.dtype,
                "out": str(Path(tmp) / f"{variant.replace(' ', '_')}.pt"),
            }
            results[variant] = r = _run_child(["--child-logprobs", json.dumps(spec)], args.threads)
            first = Path(tmp) / f"{next(iter(results)).replace(' ', '_')}.pt"
            diff = float((torch.load(str(first)) - torch.load(spec["out"])).abs().max())
            print(f"| {variant} | {r['time']:.2f} | {r['peak_mb']:.0f} | {diff:.1e} |", flush=True)
        if "naive" in results and "rlvr" in results:
            ratio = results["naive"]["peak_mb"] / max(results["rlvr"]["peak_mb"], 1e-9)
            print(f"\nrlvr uses {ratio:.1f}x less extra memory than the naive path.")


# --------------------------------------------------------------------------- plumbing


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _run_child(argv: list[str], threads: int | None) -> dict:
    extra = ["--threads", str(threads)] if threads else []
    proc = subprocess.run(
        [sys.executable, __file__, *extra, *argv], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"child {argv[0]} failed ({proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["all", "train", "logprobs"], default="all")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=49152, help="logprobs part: vocab size")
    parser.add_argument("--prompt-tokens", type=int, default=64, help="logprobs part")
    parser.add_argument("--repeats", type=int, default=3, help="logprobs part")
    parser.add_argument(
        "--dtype", choices=["float32", "bfloat16"], default="float32", help="logprobs part"
    )
    parser.add_argument(
        "--variants",
        default="naive,naive+keep,rlvr unfused,rlvr",
        help="logprobs part: comma-separated subset of the methods (naive is the reference)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads in the measured processes (default: torch's choice); "
        "use 1 on a machine other jobs share: OpenMP threads that wait on each other while "
        "the cores are busy elsewhere can make a 2-thread run many times slower",
    )
    parser.add_argument("--child-train", help=argparse.SUPPRESS)
    parser.add_argument("--child-logprobs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.child_train:
        print(json.dumps(child_train(json.loads(args.child_train))))
        return
    if args.child_logprobs:
        print(json.dumps(child_logprobs(json.loads(args.child_logprobs))))
        return
    if args.part in ("all", "train"):
        part_train(args)
    if args.part in ("all", "logprobs"):
        part_logprobs(args)


if __name__ == "__main__":
    main()
