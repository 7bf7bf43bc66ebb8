"""rlvr against TRL's ``GRPOTrainer`` on identical work: seconds per step, peak memory, ratio.

    python bench/vs_trl.py --threads 1                            # tiny, vocab150k, smollm2
    python bench/vs_trl.py --models tiny --steps 3 --warmup 1 --json out.json
    python bench/vs_trl.py --device cuda --trl-python python3      # a GPU host with trl installed
    python bench/vs_trl.py --models vocab150k --precision bfloat16 --trace-memory  # GPU-like

TRL is never a dependency of rlvr: the first run creates ``bench/.venv-trl`` (gitignored) with
``trl==1.16.0`` (the newest release; it needs ``transformers>=4.56.2``) and *our* versions of
torch, transformers, accelerate and datasets, all from the package index, and reuses it after
that (delete it to rebuild); ``--trl-python`` names an interpreter that already has ``trl``
instead (a host without a package index). Each framework trains in its own fresh process (TRL's
in that venv), so each peak RSS (``ru_maxrss``, model loading included) and, on CUDA, each peak
of allocated GPU memory (``torch.cuda.max_memory_allocated``) is its own. ``--trace-memory``
reports instead each worker's peak of live tensor bytes as the torch profiler records every
allocation, with what was alive at that moment by allocating operation: on a CPU, what
``max_memory_allocated`` would say, so a GPU memory gap can be taken apart without a GPU
(slower: every operation is recorded).

Models (written once to a temp dir; both frameworks load the same directory):

- ``tiny``: :func:`rlvr.build_tiny_model`, hidden 256, 4 layers, vocab 512;
- ``vocab150k``: the same layers with a 151,936-token vocabulary (Qwen's size), so memory goes
  to the logits; the tokenizer stays the tiny one (ids it does not know decode to nothing, the
  same in both frameworks, so most completions decode to short strings);
- ``smollm2``: SmolLM2-135M-Instruct, dequantized by rlvr from
  ``examples/models/SmolLM2-135M-Instruct.Q4_1.gguf`` (``bash examples/fetch_smollm2.sh``)
  and saved as a plain float32 HF directory that both load;
- ``qwen0.5b-shape`` (not in the default set): Qwen2.5-0.5B's layers and 151,936-token
  vocabulary with random weights and the tiny tokenizer, for GPU hosts: the compute and memory
  of a real 0.5B model without a download (random weights rarely stop early, so completions
  run to the limit in both frameworks).

Identical work, setting by setting (rlvr config key <-> ``GRPOConfig`` field):

- prompts: the first ``--prompts`` GSM8K questions of ``examples/data/gsm8k/train.jsonl`` with a
  system prompt, as a ``prompt`` column of chat messages; both render them with the tokenizer's
  chat template (generation prompt added) and every step uses the same prompts (the dataset is
  exactly one step's prompts), so both sample from the same inputs; TRL 1.16 has no
  ``max_prompt_length``, rlvr's is set high enough that nothing is truncated;
- completions per step: rlvr ``per_device_train_batch_size`` (prompts) x ``num_generations``
  = TRL ``per_device_train_batch_size`` (completions), ``num_generations`` the same,
  ``gradient_accumulation_steps: 1``, ``steps_per_generation: 1``, one process;
- ``max_completion_length``, ``temperature: 1``, ``top_p: 1``, no top-k, sampling with hf
  ``generate`` on both (rlvr ``backend: hf``; TRL ``use_vllm: False``, no continuous batching);
  both stop a completion at the tokenizer's and the model's end-of-sequence ids;
- algorithm: rlvr ``grpo`` with ``loss_type: grpo`` (seq-mean-token-mean), ``epsilon: 0.2``,
  ``scale_rewards: group``, ``num_iterations: 1``, ``beta`` = ``--beta`` (0: no reference
  model); TRL ``loss_type="grpo"``, the same ``epsilon``, ``scale_rewards``, ``num_iterations``,
  ``beta``, ``mask_truncated_completions: False``, ``top_entropy_quantile: 1``;
- optimizer: AdamW (``adamw_torch``; fused on CUDA: rlvr always, TRL ``adamw_torch_fused``),
  the same learning rate, constant schedule, no warmup, ``max_grad_norm: 1``, weight decay 0;
  no gradient checkpointing (TRL's default is on);
- precision: ``--device cpu`` (the default) float32 everywhere (rlvr ``dtype: float32``, TRL
  ``bf16: False``, ``use_cpu: True``); ``--device cuda`` float32 weights computing in bfloat16
  under autocast in both (rlvr ``dtype: bfloat16``, TRL a float32 model with ``bf16: True``);
  ``--precision`` picks either on either device (bfloat16 on a CPU: autocast there too);
- reward: :func:`format_reward`, a plain TRL-style function; rlvr calls it through the
  ``callable`` reward, in-process (``reward_workers: 0``), TRL calls it directly;
- threads: ``torch.set_num_threads(--threads)`` in both workers; same seed.

``bench/vs_trl_curves.py`` trains with these workers and this mapping (``work_spec``'s
``rewards``, ``lr_scheduler_type``, ``warmup_steps``, ``seed`` and ``rlvr_set`` are its keys;
each worker also returns every step's rewards) to compare reward curves instead of times.

Timing: steps after the first ``--warmup`` are averaged (on CUDA each worker synchronises the
device at the step's edges). rlvr: its own ``step_time``,
``generation_time`` (the backend's ``generate``) and ``scoring_time`` from ``metrics.jsonl``.
TRL: a ``TrainerCallback`` takes the wall time from ``on_step_begin`` to ``on_step_end`` (its
generation happens inside the step, in ``_prepare_inputs``); its ``_generate_single_turn``
(``model.generate`` with TRL's padding and EOS masking) and ``_calculate_rewards`` are wrapped
with timers. For both, "training" is step - generation - scoring (log-probabilities, loss,
backward, optimizer step, bookkeeping). Tokens/s is completion tokens per second of a whole
step. The table also prints completions, prompt tokens and completion tokens per step, counted
inside each framework, so a mismatch in the work shows.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

THIS = Path(__file__).resolve()
HERE = THIS.parent
REPO = HERE.parent
TRL_VENV = HERE / ".venv-trl"
TRL_VERSION = "1.16.0"
MODELS = ("tiny", "vocab150k", "smollm2", "qwen0.5b-shape")
DEFAULT_MODELS = ("tiny", "vocab150k", "smollm2")
QWEN_VOCAB = 151_936
#: Qwen2.5-0.5B's shape (494M parameters), random weights: a real-size model for a GPU host,
#: where no pretrained one can be downloaded. Too slow for the 2-core CPU machines.
QWEN05B_SHAPE = {
    "hidden_size": 896,
    "num_layers": 24,
    "num_heads": 14,
    "num_kv_heads": 2,
    "intermediate_size": 4864,
}
GGUF = REPO / "examples" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GSM8K = REPO / "examples" / "data" / "gsm8k" / "train.jsonl"
SYSTEM_PROMPT = (
    "Think step by step inside <think> </think> tags, then give only the final number "
    "inside <answer> </answer> tags."
)
TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL-style reward: 0.25 per format tag present, plus a character hash below 0.01 so that
    a random model's completions still differ within a group."""
    out = []
    for c in completions:
        text = c if isinstance(c, str) else c[-1]["content"]
        tags = sum(tag in text for tag in TAGS) / len(TAGS)
        out.append(tags + (sum(map(ord, text)) % 997) / 99_700)
    return out


# --------------------------------------------------------------------------- the shared work


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help=f"comma-separated, of {', '.join(MODELS)}",
    )
    parser.add_argument("--steps", type=int, default=4, help="timed steps")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before them")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in both workers")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max-completion-length", type=int, default=64)
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient (both)")
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--precision",
        choices=("float32", "bfloat16"),
        help="compute dtype in both (default: float32 on cpu, bfloat16 on cuda)",
    )
    parser.add_argument(
        "--trace-memory",
        action="store_true",
        help="report each worker's peak of live tensor memory on its device, traced by the torch"
        " profiler, and what was alive then by allocating operation (on a CPU: what"
        " max_memory_allocated would say)",
    )
    parser.add_argument(
        "--trl-python", help="a python that imports trl (default: the bench's own venv)"
    )
    parser.add_argument(
        "--rlvr-rows",
        action="store_true",
        help="also time rlvr with each completion's prompt in its own row (no packing of a "
        "group behind its prompt, as TRL computes it): what packing buys on this device",
    )
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    args.models = models
    for name in ("steps", "threads", "prompts", "max_completion_length"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be 0 or more")
    if args.generations < 2:
        parser.error("--generations must be at least 2 (GRPO compares completions of a prompt)")
    if args.precision is None:
        args.precision = "bfloat16" if args.device == "cuda" else "float32"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no GPU here")
    return args


def work_spec(args: argparse.Namespace, model_dir: Path, data: Path, out: Path) -> dict[str, Any]:
    """Everything both workers need, in one JSON-able dict (the single source of the settings)."""
    return {
        "model": str(model_dir),
        "data": str(data),
        "output_dir": str(out),
        "steps": args.warmup + args.steps,
        "warmup": args.warmup,
        "threads": args.threads,
        "prompts": args.prompts,
        "generations": args.generations,
        "max_completion_length": args.max_completion_length,
        "beta": args.beta,
        "learning_rate": args.learning_rate,
        "device": args.device,
        "precision": args.precision,
        "trace_memory": args.trace_memory,
        "seed": 0,
        "pack": True,
        # what bench/vs_trl_curves.py changes: the reward functions ("file.py:function", TRL
        # style, weight 1 each) and the learning-rate schedule
        "rewards": [f"{THIS}:format_reward"],
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        # dotted rlvr config keys set on rlvr's side only: a deliberate mismatch, to see that
        # the comparison notices one (vs_trl_curves.py --rlvr-set)
        "rlvr_set": {},
    }


def rlvr_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The rlvr config of ``spec``: ``per_device_train_batch_size`` counts prompts."""
    config = _rlvr_config(spec)
    for key, value in spec.get("rlvr_set", {}).items():
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return config


def _rlvr_config(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {
            "name_or_path": spec["model"],
            "dtype": spec["precision"],
        },
        "data": {"path": spec["data"], "prompt_field": "prompt"},
        "rewards": [
            {"name": "callable", "label": f.rpartition(":")[2], "params": {"function": f}}
            for f in spec["rewards"]
        ],
        "algorithm": {
            "name": "grpo",
            "params": {
                "beta": spec["beta"],
                "epsilon": 0.2,
                "loss_type": "grpo",
                "scale_rewards": "group",
                "num_iterations": 1,
            },
        },
        "backend": {"name": "hf"},
        "training": {
            "output_dir": spec["output_dir"],
            "max_steps": spec["steps"],
            "per_device_train_batch_size": spec["prompts"],
            "num_generations": spec["generations"],
            "gradient_accumulation_steps": 1,
            "max_prompt_length": 4096,
            "max_completion_length": spec["max_completion_length"],
            "temperature": 1.0,
            "top_p": 1.0,
            "learning_rate": spec["learning_rate"],
            "lr_scheduler_type": spec["lr_scheduler_type"],
            "warmup_steps": spec["warmup_steps"],
            "max_grad_norm": 1.0,
            "weight_decay": 0.0,
            "optim": "adamw_torch",
            "reward_workers": 0,
            "save_steps": 1_000_000,
            "log_samples_steps": 1_000_000,
            "seed": spec["seed"],
            # --rlvr-rows: every completion's row holds its own prompt, as TRL computes it
            "pack_prompts": spec["pack"],
        },
    }


def trl_config(spec: dict[str, Any]) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments for ``spec``: ``per_device_train_batch_size`` counts
    completions."""
    cuda = spec["device"] == "cuda"
    return {
        "output_dir": spec["output_dir"],
        "max_steps": spec["steps"],
        "per_device_train_batch_size": spec["prompts"] * spec["generations"],
        "num_generations": spec["generations"],
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "num_iterations": 1,
        "max_completion_length": spec["max_completion_length"],
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "use_vllm": False,
        "loss_type": "grpo",
        "beta": spec["beta"],
        "epsilon": 0.2,
        "scale_rewards": "group",
        "mask_truncated_completions": False,
        "top_entropy_quantile": 1.0,
        "learning_rate": spec["learning_rate"],
        "lr_scheduler_type": spec["lr_scheduler_type"],
        "warmup_steps": spec["warmup_steps"],
        "max_grad_norm": 1.0,
        "weight_decay": 0.0,
        "optim": "adamw_torch_fused" if cuda else "adamw_torch",
        "bf16": spec["precision"] == "bfloat16",
        "fp16": False,
        "gradient_checkpointing": False,
        "use_cpu": not cuda,
        "model_init_kwargs": {"dtype": "float32"},
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "log_completions": False,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "seed": spec["seed"],
    }


def summarize(steps: list[dict[str, float]], warmup: int) -> dict[str, float]:
    """Means over the steps after ``warmup``; training = step - generation - scoring."""
    timed = steps[warmup:] or steps
    n = len(timed)

    def mean(key: str) -> float:
        return sum(s[key] for s in timed) / n

    out = {k: mean(k) for k in ("step", "generation", "scoring", "completions")}
    out |= {k: mean(k) for k in ("prompt_tokens", "completion_tokens")}
    out["training"] = out["step"] - out["generation"] - out["scoring"]
    out["mean_length"] = out["completion_tokens"] / max(out["completions"], 1)
    out["tokens_per_s"] = out["completion_tokens"] / out["step"] if out["step"] else 0.0
    return out


def _peaks() -> dict[str, float]:
    """Peak RSS and, when CUDA was used, peak allocated GPU memory, in MiB."""
    import torch

    peaks = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peaks["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return peaks


def traced(worker: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """``worker(spec)`` with every tensor allocation on ``spec["device"]`` recorded by the torch
    profiler: the peak of live tensor bytes over the whole run (model loading included) and
    what was alive at that moment, by the operation that allocated it.

    On a CPU this stands in for ``torch.cuda.max_memory_allocated`` (which RSS is not: RSS also
    holds the libraries and the allocator's cached pages), so a GPU memory gap can be studied on
    a machine without a GPU. Each allocation is named ``outer > inner``: the top-level operation
    (``autograd::engine::evaluate_function: ...`` in a backward pass) and the innermost one that
    is not a bare ``empty``.
    """
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if spec["device"] == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, profile_memory=True) as prof:
        result = worker(spec)
    events: list[tuple[int, int, int, str]] = []  # (time, ptr, bytes, label)
    stack = [(node, ()) for node in prof.profiler.kineto_results.experimental_event_tree()]
    while stack:
        node, names = stack.pop()
        fields = node.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation":
            if fields.device.type == spec["device"]:
                ops = [n for n in names if not n.startswith("aten::empty")] or list(names) or ["?"]
                label = ops[0] if len(ops) == 1 else f"{ops[0]} > {ops[-1]}"
                events.append((node.start_time_ns, fields.ptr, fields.alloc_size, label))
            continue
        stack.extend((child, (*names, node.name)) for child in node.children)
    events.sort(key=lambda e: e[0])
    current = peak = peak_at = 0
    for i, (_, _, size, _) in enumerate(events):
        current += size
        if current > peak:
            peak, peak_at = current, i
    live: dict[int, tuple[int, str]] = {}
    for _, ptr, size, label in events[: peak_at + 1]:
        if size > 0:
            live[ptr] = (size, label)
        else:
            live.pop(ptr, None)
    by_label: dict[str, float] = {}
    for size, label in live.values():
        by_label[label] = by_label.get(label, 0.0) + size / 2**20
    result["peak_traced_mb"] = peak / 2**20
    result["traced_at_peak_mb"] = dict(sorted(by_label.items(), key=lambda kv: -kv[1])[:12])
    return result


def _sync(spec: dict[str, Any]) -> None:
    """Wait for the GPU, so a step's wall time holds its kernels."""
    if spec["device"] == "cuda":
        import torch

        torch.cuda.synchronize()


# --------------------------------------------------------------------------- workers


def reward_names(spec: dict[str, Any]) -> list[str]:
    """The reward functions' names: TRL's ``rewards/<name>/mean`` and rlvr's reward labels."""
    return [f.rpartition(":")[2] for f in spec["rewards"]]


def load_reward(function: str) -> Any:
    """The function ``"path/to/file.py:name"`` (the TRL worker's stand-in for rlvr's
    ``callable`` loader: rlvr is not installed in TRL's venv)."""
    import importlib.util

    path, _, name = function.rpartition(":")
    loader = importlib.util.spec_from_file_location(f"bench_reward_{Path(path).stem}", path)
    assert loader is not None and loader.loader is not None, function
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return getattr(module, name)


def child_rlvr(spec: dict[str, Any]) -> dict[str, Any]:
    import rlvr

    host = rlvr.create_host()
    config = rlvr.load_config(rlvr_config(spec), host, allow_code=True)  # our own reward
    rlvr.train(config, progress=False, host=host, allow_code=True)
    # The work as rlvr counted it (metrics.jsonl, a line per step): the kept groups'
    # completions, their prompts' tokens and their own; and what the step's completions
    # (sampled before its update) scored.
    steps = [
        {
            "step": m["step_time"],
            "generation": m["generation_time"],
            "scoring": m["scoring_time"],
            "completions": m["groups_kept"] * spec["generations"],
            "prompt_tokens": m["prompt_tokens"],
            "completion_tokens": m["num_tokens"],
            "reward": m["reward"],
            **{f"rewards/{n}": m[f"rewards/{n}/mean"] for n in reward_names(spec)},
        }
        for m in rlvr.read_metrics(spec["output_dir"])
    ]
    return {"steps": steps, **_peaks()}


def child_trl(spec: dict[str, Any]) -> dict[str, Any]:
    from datasets import load_dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    dataset = load_dataset("json", data_files=spec["data"], split="train")
    trainer = GRPOTrainer(
        model=spec["model"],
        reward_funcs=[load_reward(f) for f in spec["rewards"]],
        args=GRPOConfig(**trl_config(spec)),
        train_dataset=dataset,
    )
    steps: list[dict[str, float]] = []
    current: dict[str, float] = {}

    def timed(method: str, key: str, count: bool = False) -> None:
        inner = getattr(trainer, method)

        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = inner(*a, **kw)
            current[key] = current.get(key, 0.0) + time.perf_counter() - t0
            if count:  # _generate_single_turn(prompt_ids, ...) -> (completion_ids, logprobs)
                current["completions"] = current.get("completions", 0) + len(out[0])
                current["prompt_tokens"] = current.get("prompt_tokens", 0) + sum(map(len, a[0]))
                tokens = sum(map(len, out[0]))
                current["completion_tokens"] = current.get("completion_tokens", 0) + tokens
            return out

        setattr(trainer, method, wrapper)

    timed("_generate_single_turn", "generation", count=True)
    timed("_calculate_rewards", "scoring")

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            _sync(spec)
            current.clear()
            current["start"] = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            _sync(spec)
            record = {"step": time.perf_counter() - current.pop("start"), **current}
            steps.append({"generation": 0.0, "scoring": 0.0, **record})

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            # logging_steps=1: each step's log follows its on_step_end, and holds what that
            # step's completions (sampled before its update) scored
            if logs and "reward" in logs:
                steps[-1]["reward"] = logs["reward"]
                for n in reward_names(spec):
                    steps[-1][f"rewards/{n}"] = logs[f"rewards/{n}/mean"]

    trainer.add_callback(StepTimer())
    trainer.train()
    return {"steps": steps, **_peaks()}


# --------------------------------------------------------------------------- driver


def ensure_trl_venv() -> Path:
    """The scratch venv's python, created on first use with our torch/transformers versions."""
    python = TRL_VENV / "bin" / "python"
    marker = TRL_VENV / f"trl-{TRL_VERSION}.ok"
    if marker.is_file():
        return python
    import accelerate
    import datasets
    import torch
    import transformers

    torch_version = torch.__version__.split("+")[0]
    pins = [
        f"torch=={torch_version}",
        f"transformers=={transformers.__version__}",
        f"accelerate=={accelerate.__version__}",
        f"datasets=={datasets.__version__}",
        f"trl=={TRL_VERSION}",
    ]
    print(f"creating {TRL_VENV} with {' '.join(pins)} (once; a few minutes)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(TRL_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    marker.write_text(" ".join(pins) + "\n")
    return python


def build_model(name: str, out: Path) -> Path:
    """Write model ``name`` as a plain float32 HF directory (weights + tokenizer) at ``out``."""
    from rlvr import build_tiny_model

    if name == "tiny":
        return build_tiny_model(out, hidden_size=256, num_layers=4)
    if name in ("vocab150k", "qwen0.5b-shape"):
        import torch
        from transformers import AutoConfig, AutoTokenizer, Qwen2ForCausalLM

        shape = QWEN05B_SHAPE if name == "qwen0.5b-shape" else {"hidden_size": 256, "num_layers": 4}
        build_tiny_model(out, **shape)
        config = AutoConfig.from_pretrained(out)
        config.vocab_size = QWEN_VOCAB
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = Qwen2ForCausalLM(config).float()
        model.generation_config.eos_token_id = config.eos_token_id
        model.generation_config.pad_token_id = config.pad_token_id
        model.save_pretrained(out)
        AutoTokenizer.from_pretrained(out).save_pretrained(out)
        return out
    if not GGUF.is_file():
        raise SystemExit(f"{GGUF} is missing; fetch it first: bash examples/fetch_smollm2.sh")
    import rlvr

    model_config = rlvr.load_config(
        {"model": {"name_or_path": str(GGUF)}}, rlvr.create_host(), training=False
    ).model
    model, tokenizer = rlvr.load_policy(model_config, dtype=None)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def write_prompts(path: Path, count: int) -> Path:
    """The first ``count`` GSM8K questions as chat-message prompts (plus their answers)."""
    rows = []
    with GSM8K.open() as f:
        for line in f:
            row = json.loads(line)
            messages = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": row["question"]},
            ]
            rows.append({"prompt": messages, "answer": row["answer"]})
            if len(rows) == count:
                break
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_child(
    python: Path | str, framework: str, spec: dict[str, Any], *, isolate: bool
) -> dict[str, Any] | None:
    """One framework's run in a fresh process; ``isolate`` hides PYTHONPATH from it (the TRL
    venv must not see the packages of the environment that started the bench). A failed worker
    gives None, so one failure does not lose the other models' figures."""
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"])}
    if isolate:
        env["PYTHONPATH"] = ""
    if spec["device"] == "cpu":  # rlvr takes a GPU whenever it sees one
        env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run(
        [str(python), __file__, "--child", framework, json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-6000:])
        print(f"the {framework} worker failed ({proc.returncode}); its stderr is above", flush=True)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _row(name: str, r: dict[str, float], peak_key: str) -> str:
    return (
        f"| {name} | {r['step']:.2f} | {r['generation']:.2f} | {r['training']:.2f} | "
        f"{r['scoring']:.3f} | {r['tokens_per_s']:.1f} | {r[peak_key]:.0f} | "
        f"{r['completions']:.0f} | {r['prompt_tokens']:.0f} | {r['completion_tokens']:.0f} | "
        f"{r['mean_length']:.1f} |"
    )


def compare(args: argparse.Namespace) -> dict[str, Any]:
    trl_python = args.trl_python or ensure_trl_venv()
    if args.trace_memory:
        peak_key, peak_label = "peak_traced_mb", "peak traced MiB"
    elif args.device == "cuda":
        peak_key, peak_label = "peak_gpu_mb", "peak GPU MiB"
    else:
        peak_key, peak_label = "peak_rss_mb", "peak RSS MiB"
    results: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items() if k != "child"}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_prompts(root / "prompts.jsonl", args.prompts)
        for name in args.models:
            model_dir = build_model(name, root / name)
            print(
                f"\n## {name}: {args.prompts} prompts x {args.generations} completions, up to "
                f"{args.max_completion_length} tokens, beta {args.beta}, {args.threads} thread(s),"
                f" {args.device}; mean of steps {args.warmup + 1}..{args.warmup + args.steps}\n"
            )
            print(
                "| framework | s/step | generation s | training s | scoring s | tokens/s "
                f"| {peak_label} | completions | prompt tokens | completion tokens | mean length |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            out: dict[str, Any] = {}
            runs = [("rlvr", "rlvr", sys.executable, True)]
            if args.rlvr_rows:
                runs.append(("rlvr rows", "rlvr", sys.executable, False))
            runs.append(("trl", "trl", trl_python, True))
            for label, framework, python, pack in runs:
                spec = work_spec(args, model_dir, data, root / f"{name}-{label.replace(' ', '-')}")
                spec["pack"] = pack
                isolate = framework == "trl" and not args.trl_python
                raw = run_child(python, framework, spec, isolate=isolate)
                if raw is None:
                    continue
                peaks = {k: v for k, v in raw.items() if k.startswith(("peak_", "traced_"))}
                out[label] = {**summarize(raw["steps"], args.warmup), **peaks}
                print(_row(label, out[label], peak_key), flush=True)
            for label in ("rlvr", "rlvr rows", "trl"):
                if "traced_at_peak_mb" in out.get(label, {}):
                    print(f"\n{label}: alive at its traced peak, MiB by allocating operation")
                    for op, mb in out[label]["traced_at_peak_mb"].items():
                        print(f"  {mb:8.1f}  {op}")
            results[name] = out
            b = out.get("trl")
            for label, key in (("rlvr", "ratio"), ("rlvr rows", "ratio_rows")):
                a = out.get(label)
                if a is None or b is None:
                    continue
                keys = ("step", "generation", "training", "tokens_per_s", peak_key, "mean_length")
                ratio = {k: a[k] / b[k] if b[k] else float("nan") for k in keys}
                out[key] = ratio
                print(
                    f"| {label}/TRL | {ratio['step']:.2f}x | {ratio['generation']:.2f}x | "
                    f"{ratio['training']:.2f}x | | {ratio['tokens_per_s']:.2f}x | "
                    f"{ratio[peak_key]:.2f}x | | | | {ratio['mean_length']:.2f}x |"
                )
                for what in ("completions", "prompt_tokens"):
                    if a[what] != b[what]:
                        print(f"WARNING: {what} per step differ ({label} {a[what]}, TRL {b[what]})")
    return results


def main() -> None:
    args = parse_args()
    if args.child:
        framework, spec_json = args.child
        spec = json.loads(spec_json)
        import torch

        torch.set_num_threads(spec["threads"])
        worker = child_rlvr if framework == "rlvr" else child_trl
        print(json.dumps(traced(worker, spec) if spec["trace_memory"] else worker(spec)))
        return
    results = compare(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if any("ratio" not in results[name] for name in args.models):
        raise SystemExit("some workers failed: their errors are above")


if __name__ == "__main__":
    main()
