"""Where one training step's time goes, on a real config (default: the SmolLM2 GSM8K example).

    python bench/step_profile.py --model DIR_OR_GGUF --steps 3 --threads 1
    python bench/step_profile.py --model DIR --unfused   # the log-probs path before fusing
    python bench/step_profile.py --model DIR --no-skip   # passes for inert rows too (before)
    python bench/step_profile.py --model DIR --no-share  # every pass runs every layer (before)
    python bench/step_profile.py --model DIR --no-pack   # a group's prompt once per row (before)

Runs ``rlvr``'s trainer for ``--steps`` steps of ``--config`` (``--set key=value`` overrides
as on the command line) and splits each step's wall time into: generation (the rollout,
rewards included), the no-grad passes (old/reference log-probs, old values), the policy's
forward passes under gradients, backward, clipping + optimizer step, and the rest. Each phase
is timed in CPU seconds of this process (``time.process_time``, all threads), which other jobs
on a shared machine disturb far less than wall time; the step's wall time is printed too.
Prints the median over the steps after the first and the peak RSS above the loaded model
(the figure that the log-probability path changes).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("generation", "no_grad passes", "forward", "backward", "optimizer", "other")


def _timed(owner: object, name: str, bucket: str, totals: dict, *, only_grad: bool = False):
    """Wrap ``owner.name`` so its CPU time adds to ``totals[bucket]``."""
    import torch

    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if only_grad and not torch.is_grad_enabled():
            return original(*args, **kwargs)
        t0 = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            totals[bucket] += time.process_time() - t0

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "examples" / "gsm8k_smollm2.yaml"))
    parser.add_argument("--model", help="model.name_or_path override (a directory or .gguf)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    parser.add_argument(
        "--unfused",
        action="store_true",
        help="log-probabilities through the model's own forward and full logits (the path "
        "before the fused head; for a before/after comparison)",
    )
    parser.add_argument(
        "--no-skip",
        action="store_true",
        help="run the passes of rows whose loss has no gradient too (zero-advantage GRPO "
        "groups; the update before it skipped them, for a before/after comparison)",
    )
    parser.add_argument(
        "--no-share",
        action="store_true",
        help="every pass runs the layers below LoRA's too (before the no-grad pass computed "
        "them once per step, for a before/after comparison)",
    )
    parser.add_argument(
        "--no-pack",
        action="store_true",
        help="every row computes its prompt (before a group's completions were packed behind "
        "one prompt, for a before/after comparison)",
    )
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*optimizer.step.*overridden")  # our timer
    from rlvr import load_config
    from rlvr.api.host import create_host
    from rlvr.training.trainer import Trainer
    from rlvr.training.update import PolicyUpdate

    if args.unfused:
        import rlvr.model.logprobs

        rlvr.model.logprobs._fusable_head = lambda model: None
    if args.no_share:
        import rlvr.model.logprobs

        rlvr.model.logprobs.shared_layers = lambda model: 0
    if args.no_pack:
        import rlvr.model.logprobs

        rlvr.model.logprobs._pack = lambda *a: None
        rlvr.model.logprobs.packs_prompts = lambda model: False
    if args.no_skip:
        PolicyUpdate._active = lambda self, batch: batch  # type: ignore[method-assign]
    totals: dict[str, float] = defaultdict(float)
    _timed(PolicyUpdate, "fill_no_grad", "no_grad passes", totals)
    _timed(PolicyUpdate, "_logprobs", "forward", totals, only_grad=True)
    _timed(PolicyUpdate, "_clip", "optimizer", totals)
    _timed(torch.Tensor, "backward", "backward", totals)

    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            f"training.output_dir={tmp}",
            f"training.max_steps={args.steps}",
            "training.save_steps=100000",
            "training.reward_workers=0",
            *args.set,
        ]
        if args.model:
            overrides.append(f"model.name_or_path={args.model}")
        host = create_host()
        config = load_config(args.config, host, overrides=overrides)
        trainer = Trainer(config, host, progress=False)
        trainer.setup()
        _timed(trainer.update.optimizer, "step", "optimizer", totals)
        _timed(trainer.rollouts, "run", "generation", totals)
        base_rss = _rss_mb()
        rows = []
        for _ in range(args.steps):
            totals.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            m = trainer.train_step()
            cpu = time.process_time() - c0
            row = {k: totals[k] for k in PHASES[:-1]}
            row["other"] = cpu - sum(row.values())
            row["total"] = cpu
            row["wall"] = time.perf_counter() - t0
            row["tokens"] = m["num_tokens"]
            row["inert"] = m["inert_frac"]
            row["equal"] = m["zero_std_frac"]
            rows.append(row)
        packed = trainer.update.packs
        trainer.close()
    later = rows[1:] or rows
    print(
        f"\n## One step of {Path(args.config).name} ({args.steps} steps, median of steps "
        f"2..{args.steps}), {torch.get_num_threads()} threads, {torch.__version__}\n"
    )
    print("| phase | CPU seconds | share |")
    print("|---|---:|---:|")
    total = statistics.median(r["total"] for r in later)
    for phase in PHASES:
        s = statistics.median(r[phase] for r in later)
        print(f"| {phase} | {s:.2f} | {100 * s / total:.0f}% |")
    print(f"| **step** | **{total:.2f}** | |")
    wall = statistics.median(r["wall"] for r in later)
    tokens = statistics.median(r["tokens"] for r in later)
    print(f"\nwall {wall:.1f} s/step (loaded machine: see CPU seconds); {tokens:.0f} tokens/step")
    equal = ", ".join(f"{r['equal']:.2f}" for r in rows)
    inert = ", ".join(f"{r['inert']:.2f}" for r in rows)
    print(f"groups of equal scores per step: {equal}; rows skipped (inert_frac): {inert}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"prompts packed per group: {'yes' if packed else 'no'}")
    print(f"\npeak RSS {peak:.0f} MiB; above the loaded model: {peak - base_rss:.0f} MiB")
    print("CPU s per step: " + ", ".join(f"{r['total']:.1f}" for r in rows))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


if __name__ == "__main__":
    main()
