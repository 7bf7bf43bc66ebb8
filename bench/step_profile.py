"""Where one training step's time goes, on a real config (default: the SmolLM2 GSM8K example).

    python bench/step_profile.py --model DIR_OR_GGUF --steps 3 --threads 1
    python bench/step_profile.py --model DIR --no-skip   # passes for inert rows too (before)
    python bench/step_profile.py --model DIR --no-pack   # a group's prompt once per row (before)

Trains ``--config`` for ``--steps`` steps with ``rlvr.train`` (``--set key=value`` overrides as
on the command line, ``training.profile_phases`` on) and splits each step's time into what
``metrics.jsonl`` reports: generation (the rollout, rewards included), the no-grad passes
(old/reference log-probabilities, old values), the update's forward passes and losses,
backward, clipping + optimizer step, and the rest. Each phase is in CPU seconds of this
process (all threads), which other jobs on a shared machine disturb far less than wall time;
the step's wall time is printed too. Prints the median over the steps after the first and
the process's peak RSS.

``--no-pack`` is ``training.pack_prompts: false``; ``--no-skip`` trains with the config's
algorithm wrapped in an in-process plugin that has no ``inert()``, so the update runs the
passes of rows whose loss has no gradient too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import rlvr  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: Table row -> the ``profile/<phase>`` metric (``training.profile_phases``).
PHASES = {
    "generation": "generation",
    "no_grad passes": "no_grad",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
}


class _WithoutInert:
    """An algorithm's built object without ``inert()`` (optional in
    :class:`rlvr.plugin.AlgorithmImpl`): the update then skips no rows."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl

    def __getattr__(self, name: str) -> Any:
        if name == "inert":
            raise AttributeError(name)
        return getattr(self._impl, name)


def _no_skip_plugin(record: rlvr.plugin.Algorithm) -> object:
    """An in-process plugin registering ``record`` as ``<name>_noskip``, without ``inert()``."""

    class NoSkip:
        @rlvr.plugin.hookimpl
        def rlvr_register_algorithms(self, register: Any) -> None:
            register(
                rlvr.plugin.Algorithm(
                    name=f"{record.name}_noskip",
                    params=record.params,
                    factory=lambda params, run: _WithoutInert(record.factory(params, run)),
                    requirements=record.requirements,
                    description=f"{record.name}, every row's passes run (bench)",
                )
            )

    return NoSkip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "examples" / "gsm8k_smollm2.yaml"))
    parser.add_argument("--model", help="model.name_or_path override (a directory or .gguf)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    parser.add_argument(
        "--no-skip",
        action="store_true",
        help="run the passes of rows whose loss has no gradient too (zero-advantage GRPO "
        "groups; the update before it skipped them, for a before/after comparison)",
    )
    parser.add_argument(
        "--no-pack",
        action="store_true",
        help="every row computes its prompt (training.pack_prompts: false; before a group's "
        "completions were packed behind one prompt, for a before/after comparison)",
    )
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            f"training.output_dir={tmp}",
            f"training.max_steps={args.steps}",
            "training.save_steps=100000",
            "training.reward_workers=0",
            "training.profile_phases=true",
            *args.set,
        ]
        if args.model:
            overrides.append(f"model.name_or_path={args.model}")
        if args.no_pack:
            overrides.append("training.pack_prompts=false")
        host = rlvr.create_host()
        if args.no_skip:
            config = rlvr.load_config(args.config, host, overrides=overrides)
            assert config.algorithm is not None
            record = host.algorithms[config.algorithm.name]
            host = rlvr.create_host(plugins=[_no_skip_plugin(record)])
            overrides.append(f"algorithm.name={record.name}_noskip")
        config = rlvr.load_config(args.config, host, overrides=overrides)
        rlvr.train(config, progress=False, host=host)
        metrics = [m for m in rlvr.read_metrics(tmp) if m.get("step", 0) > 0]
    rows = []
    for m in metrics:
        row = {name: m.get(f"profile/{phase}", 0.0) for name, phase in PHASES.items()}
        row["other"] = m["cpu_time"] - sum(row.values())
        row["total"] = m["cpu_time"]
        row["wall"] = m["step_time"]
        row["tokens"] = m["num_tokens"]
        row["inert"] = m["inert_frac"]
        row["equal"] = m["zero_std_frac"]
        row["peak"] = m["peak_memory_mb"]
        rows.append(row)
    later = rows[1:] or rows
    print(
        f"\n## One step of {Path(args.config).name} ({args.steps} steps, median of steps "
        f"2..{args.steps}), {torch.get_num_threads()} threads, {torch.__version__}\n"
    )
    print("| phase | CPU seconds | share |")
    print("|---|---:|---:|")
    total = statistics.median(r["total"] for r in later)
    for phase in [*PHASES, "other"]:
        s = statistics.median(r[phase] for r in later)
        print(f"| {phase} | {s:.2f} | {100 * s / total:.0f}% |")
    print(f"| **step** | **{total:.2f}** | |")
    wall = statistics.median(r["wall"] for r in later)
    tokens = statistics.median(r["tokens"] for r in later)
    print(f"\nwall {wall:.1f} s/step (loaded machine: see CPU seconds); {tokens:.0f} tokens/step")
    equal = ", ".join(f"{r['equal']:.2f}" for r in rows)
    inert = ", ".join(f"{r['inert']:.2f}" for r in rows)
    print(f"groups of equal scores per step: {equal}; rows skipped (inert_frac): {inert}")
    print(f"prompts packed per group: {'no' if args.no_pack else 'yes, where the model allows'}")
    print(f"\npeak RSS {max(r['peak'] for r in rows):.0f} MiB (the process, model included)")
    print("CPU s per step: " + ", ".join(f"{r['total']:.1f}" for r in rows))


if __name__ == "__main__":
    main()
