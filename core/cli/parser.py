"""The ``rlvr`` command line's grammar: every command, its arguments and help text
(:func:`build_parser`), and :func:`parse_args`, which resolves the run config given as
``CONFIG`` or ``-c CONFIG``. The docs' command reference is generated from the same parser."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any

from rlvr import __version__
from rlvr.cli.scaffold import KINDS
from rlvr.config.schema import ALLOW_CODE_FLAG, TRUST_REMOTE_CODE_FLAG

NPROC_HELP = (
    "data-parallel processes on this machine (as torchrun --standalone --nproc-per-node N "
    "-m rlvr ...; for several nodes run torchrun itself)"
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written (paragraphs kept), and each option's default where it says
    something (not None, False or an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        quiet = default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0
        if "%(default)" in text or quiet or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


def _common() -> argparse.ArgumentParser:
    """Options every command takes, wherever on the line they are (``rlvr train c.yaml -v``).
    SUPPRESS as default: a subcommand that does not see -v leaves the top level's value."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show third-party progress bars and logs",
    )
    return common


def _command(sub: Any, name: str, summary: str, description: str = "") -> argparse.ArgumentParser:
    """A subcommand: ``summary`` in ``rlvr --help``, and with ``description`` in its own."""
    paragraphs = [f"{summary[0].upper()}{summary[1:]}.", description]
    return sub.add_parser(
        name,
        help=summary,
        description="\n\n".join(textwrap.fill(p, 79) for p in paragraphs if p),
        formatter_class=HelpFormatter,
        parents=[_common()],
    )


def _add_config(p: argparse.ArgumentParser) -> None:
    """The run config, the same way for every command: ``rlvr CMD CONFIG`` (``-c CONFIG``
    is accepted too)."""
    p.add_argument(
        "config", nargs="?", default=None, metavar="CONFIG", help="run config (.yaml, .yml, .toml)"
    )
    p.add_argument(
        "-c",
        "--config",
        dest="config_option",
        default=None,
        metavar="CONFIG",
        help="the run config, given as an option instead",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set training.seed=1 (repeatable)",
    )


def _add_opt_ins(p: argparse.ArgumentParser, *, code: bool = True, model: bool = True) -> None:
    """The flags without which a config runs no code (the same names on every command)."""
    if code:
        p.add_argument(
            ALLOW_CODE_FLAG,
            dest="allow_code",
            action="store_true",
            help="let the config import and run the Python code it names (the callable "
            "reward's function, the tools environment's functions, an adapter's class); only "
            "for a config you trust",
        )
    if model:
        p.add_argument(
            TRUST_REMOTE_CODE_FLAG,
            dest="trust_remote_code",
            action="store_true",
            help="let model.trust_remote_code: true run the model directory's Python files; "
            "only for a model you trust",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr",
        description="Reinforcement learning of language models with verifiable rewards.\n\n"
        "rlvr COMMAND --help describes a command and its options.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show third-party progress bars and logs"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(
        sub,
        "train",
        "train a policy from a config",
        "Validates the config (as rlvr validate does), loads the model and trains; everything "
        "lands in training.output_dir (checkpoints, metrics.jsonl, samples.jsonl).",
    )
    _add_config(p)
    _add_opt_ins(p)
    p.add_argument(
        "--resume", action="store_true", help="continue from output_dir's latest checkpoint"
    )
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N", help=NPROC_HELP)

    p = _command(
        sub,
        "validate",
        "check a config as rlvr train would, before any model loads",
        "Runs every check rlvr train runs before loading weights, with the same warnings "
        "(schema, plugin params, cross-plugin rules, the output directory, data files and "
        "columns, the model's config and chat template, the eval data). Prints every problem "
        "with its path and exits 2 (1 for an output directory that refuses the run, as rlvr "
        "train does), or ends with one OK line.",
    )
    _add_config(p)
    p.add_argument(
        "--resume",
        action="store_true",
        help="check as for rlvr train --resume (output_dir holds the run to continue)",
    )
    p.add_argument(
        "--print",
        action="store_true",
        dest="print_config",
        help="print the resolved config (every default filled in) as YAML",
    )
    _add_opt_ins(p)

    _command(
        sub,
        "schema",
        "print the JSON Schema of a config (installed plugins)",
        "For editors: a config's sections, each plugin entry a union on its name.",
    )

    p = _command(sub, "plugins", "list plugins, what they register, and failures")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    rewards = _command(sub, "rewards", "reward tools").add_subparsers(
        dest="rewards_command", required=True, metavar="COMMAND"
    )
    p = _command(
        rewards,
        "score",
        "score a JSONL file of completions",
        "Scores each row's `completion` with the config's rewards (the row's other fields "
        "reach them as dataset fields) and writes the rows with their rewards. The token ids "
        "the rewards get (completion_ids) are the row's own, else the config's model's "
        "tokens of the completion.",
    )
    _add_config(p)
    p.add_argument("--input", "-i", required=True, help="JSONL rows with a `completion` field")
    p.add_argument("--output", "-o", required=True, help="where to write the scored rows")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="reward worker processes (training.reward_workers)",
    )
    p.add_argument("--batch-size", type=int, default=256, help="rows per scoring batch")
    _add_opt_ins(p, model=False)

    env = _command(sub, "env", "environment tools").add_subparsers(
        dest="env_command", required=True, metavar="COMMAND"
    )
    p = _command(
        env,
        "check",
        "check an environment and print a few of its episodes",
        "Runs the environment's conformance checks (as rlvr.testing.check_environment), then "
        "a few episodes through the trainer's episode runner, each printed with its loss mask "
        "(the sampled tokens, trained, and the environment's, masked), its rewards, turns and "
        "timing. The policy: --script (assistant messages, turn by turn), --model, or a tiny "
        "random model.",
    )
    p.add_argument(
        "name",
        nargs="?",
        default=None,
        metavar="NAME",
        help="the environment (rlvr plugins lists them); with --config, the config's (or its "
        "environment, when the config has no environment: section)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one of the environment's params, e.g. --set max_calls_per_turn=2 (repeatable)",
    )
    p.add_argument(
        "-c",
        "--config",
        dest="run_config",
        default=None,
        metavar="CONFIG",
        help="a run config: its environment entry, data, model, sampling settings and rewards "
        "(which score each episode)",
    )
    p.add_argument("--episodes", type=int, default=2, metavar="N", help="episodes to run")
    p.add_argument("--model", default=None, metavar="PATH", help="a local model to sample from")
    p.add_argument(
        "--script",
        default=None,
        metavar="FILE",
        help="a YAML/JSON list of assistant messages, sent one per turn instead of sampling",
    )
    p.add_argument("--data", default=None, metavar="FILE", help="JSONL rows to start episodes from")
    p.add_argument("--max-turns", type=int, default=4, metavar="N", help="turns per episode")
    p.add_argument(
        "--max-tokens", type=int, default=32, metavar="N", help="tokens per sampled turn"
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument(
        "--tool-call-format",
        choices=["auto", "hermes", "none"],
        default="auto",
        help="how tool calls are read from the policy's text (auto: from the model's chat "
        "template, as in training; hermes for the tiny model)",
    )
    _add_opt_ins(p)

    p = _command(
        sub,
        "eval",
        "generate on an eval split and score it (accuracy, pass@k)",
        "Samples k completions per prompt of the eval data with the training sampling "
        "settings, scores them with the config's rewards and prints the result; a completion "
        "is correct by the correctness reward (--metric, the reward marked correctness: true, "
        "or the first that checks answers), which the result names. Writes the samples and "
        "summary.json.",
    )
    _add_config(p)
    p.add_argument(
        "--checkpoint", help="checkpoint dir or run output_dir (default: config's model)"
    )
    p.add_argument(
        "--split", default=None, help="eval split or data file (default data.eval_split)"
    )
    p.add_argument("-k", type=int, default=1, help="samples per prompt for pass@k")
    p.add_argument(
        "--greedy",
        action="store_true",
        help="decode greedily, as the in-training eval does by default (the same as --set "
        "training.temperature=0; otherwise the training sampling settings)",
    )
    p.add_argument("--limit", type=int, default=None, help="evaluate the first N prompts")
    p.add_argument(
        "--output",
        default=None,
        help="samples JSONL, or a directory for samples.jsonl and summary.json (default: a new "
        "directory named by what is evaluated, OUTPUT_DIR/eval/base or "
        "OUTPUT_DIR/eval/checkpoint-N; an earlier evaluation there is kept)",
    )
    p.add_argument("--metric", default=None, help="reward label that decides correctness")
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="correct when >= this (default: the reward's `correct` param, else 1)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N", help=NPROC_HELP)
    _add_opt_ins(p)

    p = _command(
        sub,
        "export",
        "write a checkpoint (LoRA adapters merged in) as a plain HF model",
    )
    p.add_argument("checkpoint", help="a checkpoint dir, or a run's output_dir (its latest)")
    p.add_argument("output", help="new directory for the model and tokenizer")
    p.add_argument(
        "--config", default=None, help="run config naming the base model (default: the one saved)"
    )
    _add_opt_ins(p, code=False)

    p = _command(
        sub,
        "init",
        "write a starter config, or one from a TRL script (--from-trl)",
        "Without --from-trl: a commented starter config to fill in. With --from-trl SCRIPT.py: "
        "as rlvr import-trl SCRIPT.py.",
    )
    p.add_argument("-o", "--output", default="rlvr.yaml", help="the config to write")
    p.add_argument("--from-trl", default=None, metavar="SCRIPT", help="a TRL GRPO script")
    p.add_argument("--force", action="store_true", help="replace an existing file")

    p = _command(
        sub,
        "import-trl",
        "write a config from a TRL GRPO script (read, never run)",
        "Reads the script's GRPOConfig(...) (under trl:, TRL's keys and units), the model, "
        "LoraConfig, reward_funcs (callable rewards pointing at the script's functions) and "
        "load_dataset(...) call, without running it, and says what needs your attention.",
    )
    p.add_argument("script", metavar="SCRIPT", help="the TRL script (.py)")
    p.add_argument(
        "-o", "--output", default=None, help="the config to write (default: SCRIPT.rlvr.yaml)"
    )
    p.add_argument("--force", action="store_true", help="replace an existing file")

    p = _command(
        sub,
        "data",
        "write a config's generated data (data.reasoning_gym) to train.jsonl and test.jsonl",
        "The same rows, split and seed as rlvr train and rlvr eval use; prints each split's "
        "size, its distinct questions and the task space's estimated size, and checks that no "
        "question is in both splits.",
    )
    _add_config(p)
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the two files")
    p.add_argument(
        "--space-draws",
        type=int,
        default=10_000,
        metavar="N",
        help="draws of the task's generator that estimate its space (0: skip)",
    )

    p = _command(sub, "plot", "draw a run's curves to PNG")
    p.add_argument("output_dir", help="a run's output_dir (holds metrics.jsonl)")

    new = _command(sub, "new", "scaffold a new package").add_subparsers(
        dest="new_command", required=True, metavar="WHAT"
    )
    p = _command(new, "plugin", "write a ready-to-install plugin package")
    p.add_argument("name", help="plugin name, e.g. my_reward")
    p.add_argument("--kind", choices=list(KINDS), required=True)
    p.add_argument("--dir", default=".", help="where to create the package")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with the run config resolved from ``CONFIG`` or ``-c CONFIG``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "config_option"):
        given = [c for c in (args.config, args.config_option) if c is not None]
        if len(given) != 1:
            how = "twice" if given else "none"
            sub = " ".join(a for a in (args.command, getattr(args, "rewards_command", None)) if a)
            parser.error(f"{sub}: give the run config once (got {how}): rlvr {sub} CONFIG")
        args.config = given[0]
    return args


__all__ = ["build_parser", "parse_args"]
