"""The ``rlvr`` command line: a thin layer that parses arguments and calls the library.

Heavy modules (torch, transformers, datasets: the trainer, the evaluator, the pre-flight
checks) are imported inside the commands that need them, so ``rlvr --help`` and ``rlvr plugins``
answer in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr import __version__
from rlvr.api.errors import ConfigWarning, RlvrError
from rlvr.api.host import Host, PluginError, create_host
from rlvr.cli.scaffold import KINDS, new_plugin
from rlvr.cli.starter import STARTER
from rlvr.compat.trl.importer import import_trl, write
from rlvr.config.schema import (
    ALLOW_CODE_FLAG,
    TRUST_REMOTE_CODE_FLAG,
    ConfigError,
    dump,
    json_schema,
    load_config,
)
from rlvr.data import reasoning_gym
from rlvr.evaluation.report import all_failed
from rlvr.evaluation.report import report as eval_report
from rlvr.model.installation import check_installation
from rlvr.outputs.console import quiet_third_party
from rlvr.outputs.plot import plot_run
from rlvr.parallel.launcher import LAUNCHER_ENV, die_with_parent
from rlvr.runs import evaluate, plugin_host, train, validate

NPROC_HELP = (
    "data-parallel processes on this machine (as torchrun --standalone --nproc-per-node N "
    "-m rlvr ...; for several nodes run torchrun itself)"
)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
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
        formatter_class=_HelpFormatter,
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
        formatter_class=_HelpFormatter,
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    show_warnings(verbose=args.verbose)
    if getattr(args, "nproc_per_node", 1) > 1 and "WORLD_SIZE" not in os.environ:
        return _torchrun(argv, args.nproc_per_node)
    warnings.showwarning = _show_warning
    # weights loading, dataset split generation, vLLM's INFO lines: noise for a user (the
    # Python API hides the same)
    quiet_third_party(verbose=args.verbose)
    try:
        return _COMMANDS[args.command](args)
    except ConfigError as exc:
        print(exc.format(), file=sys.stderr)
        return 2
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except RlvrError as exc:  # data, model, checkpoint, training: the message says what to fix
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rlvr schema | head`: the reader left; stop quietly
        _quiet_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a command a pipe cut short


def show_warnings(*, verbose: bool) -> None:
    """Which Python warnings reach the console: each once per place. Without ``-v`` only
    rlvr's own (:class:`ConfigWarning`, and those raised in rlvr's or a plugin's modules):
    what transformers, torch or peft warn about their own internals (transformers'
    ``is_gradient_checkpointing`` FutureWarning) says nothing about the run."""
    warnings.simplefilter("default")
    if not verbose:
        warnings.filterwarnings("ignore")
        warnings.filterwarnings("default", module=r"rlvr")  # rlvr.*, rlvr_<plugin>.*
        warnings.filterwarnings("default", category=ConfigWarning)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed pipe does not
    print "Exception ignored ... BrokenPipeError" at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


_default_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """rlvr's own warnings as one line, without a source location (it means nothing to a user)."""
    if issubclass(category, ConfigWarning):
        print(f"warning: {message}", file=file or sys.stderr)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def _host() -> Host:
    return plugin_host()


def cmd_validate(args: argparse.Namespace) -> int:
    host = _host()
    # The same sections and defaults as train: validate promises train's checks, and a config
    # without `algorithm:` trains with grpo's group-size and reference-model rules.
    config = validate(
        args.config,
        overrides=args.overrides,
        host=host,
        allow_code=args.allow_code,
        trust_remote_code=args.trust_remote_code,
        resume=args.resume,
    )
    if args.print_config:
        print(dump(config), end="", flush=True)
    # With --print the YAML alone is on stdout (`> resolved.yaml`); the verdict on stderr.
    print(
        f"OK: {args.config} is valid for rlvr train",
        file=sys.stderr if args.print_config else sys.stdout,
    )
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(_host()), indent=2))
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    host = create_host()
    plugins: list[dict[str, Any]] = [
        {
            "name": info.name,
            "dist": info.dist,
            "version": info.version,
            "registers": [
                {
                    "kind": kind,
                    "name": name,
                    "description": host.records[kind][name].description,
                }
                for kind, name in info.registered
                if name in host.records[kind]
            ],
        }
        for info in host.plugins
    ]
    failures = [{"plugin": f.plugin, "dist": f.dist, "error": f.error} for f in host.failures]
    if args.json:
        print(json.dumps({"plugins": plugins, "failures": failures}, indent=2))
        return 0
    for line in plugin_lines(plugins):
        print(line)
    if failures:
        print("\nfailed plugins:")
        for f in host.failures:
            print(f"  {f}")
    return 0


def plugin_lines(plugins: list[dict[str, Any]]) -> list[str]:
    """``rlvr plugins``' table: each plugin's line, then what it registers, the kind, name and
    description columns as wide as their longest entry (``reinforce_pp_baseline``)."""
    items = [item for plugin in plugins for item in plugin["registers"]]
    kind_width = max((len(i["kind"]) for i in items), default=0)
    name_width = max((len(i["name"]) for i in items), default=0)
    lines = []
    for plugin in plugins:
        origin = f"{plugin['dist']} {plugin['version']}" if plugin["dist"] else "in-process"
        lines.append(f"{plugin['name']}  ({origin})")
        for item in plugin["registers"]:
            kind, name = item["kind"].ljust(kind_width), item["name"].ljust(name_width)
            lines.append(f"  {kind}  {name}  {item['description']}".rstrip())
    return lines


def cmd_rewards(args: argparse.Namespace) -> int:
    host = _host()
    config = load_config(
        args.config,
        host,
        overrides=args.overrides,
        require=("rewards",),
        training=False,
        allow_code=args.allow_code,
    )
    # Loads tqdm and the reward worker pool (multiprocessing), which `rlvr --help` and
    # `rlvr plugins` do not need (a third of their time): after the config's checks.
    from rlvr.rewards.score_file import score_file

    workers = args.workers if args.workers is not None else config.training.reward_workers
    report = score_file(
        config, host, args.input, args.output, workers=workers, batch_size=args.batch_size
    )
    print(report.table())
    for line in report.bad_rows:
        print(f"warning: {line}", file=sys.stderr)
    return 0 if report.scored else 1


def cmd_env(args: argparse.Namespace) -> int:
    # Loads torch and transformers (a model samples the episodes), which `rlvr --help` and
    # `rlvr plugins` must not.
    from rlvr.cli.env_check import env_check, from_config

    host = _host()
    config = None
    if args.run_config is not None:
        config = from_config(
            host,
            args.run_config,
            args.name,
            args.overrides,
            allow_code=args.allow_code,
            trust_remote_code=args.trust_remote_code,
        )
    lines, result = env_check(
        host,
        args.name,
        overrides=args.overrides,
        episodes=args.episodes,
        model=args.model,
        script=args.script,
        data=args.data,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        seed=args.seed,
        tool_format=args.tool_call_format,
        config=config,
        allow_code=args.allow_code,
    )
    print("\n".join(lines))
    failed = [e for e in result.episodes if e.failed]
    if failed:
        print(
            f"error: {len(failed)} of {len(result.episodes)} episodes failed (see above): "
            f"{failed[0].failed}",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    host = _host()
    train(
        args.config,
        overrides=args.overrides,
        resume=args.resume,
        host=host,
        allow_code=args.allow_code,
        trust_remote_code=args.trust_remote_code,
    )
    return 0


def _torchrun(argv: Sequence[str] | None, nproc: int) -> int:
    """``rlvr train|eval --nproc-per-node N``: the same command under torchrun (one machine).

    From the command line on Linux this process becomes torchrun (``exec``: the same pid,
    recorded for the ranks in :data:`~rlvr.parallel.launcher.LAUNCHER_ENV`), so killing
    it kills torchrun, and the ranks die with it (:func:`~rlvr.parallel.launcher.
    tie_to_launcher`). Called from Python, torchrun is a child that dies with the caller."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={nproc}", "-m", "rlvr"]
    cmd += list(sys.argv[1:] if argv is None else argv)
    if argv is None and sys.platform.startswith("linux"):
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, cmd, {**os.environ, LAUNCHER_ENV: str(os.getpid())})
    return subprocess.call(cmd, preexec_fn=die_with_parent)


def cmd_eval(args: argparse.Namespace) -> int:
    # Loads torch with the evaluator, which `rlvr --help` and `rlvr plugins` must not.

    host = _host()
    result: dict[str, Any] = evaluate(
        args.config,
        checkpoint=args.checkpoint,
        overrides=args.overrides,
        greedy=args.greedy,
        split=args.split,
        k=args.k,
        limit=args.limit,
        output=args.output,
        metric=args.metric,
        threshold=args.threshold,
        host=host,
        allow_code=args.allow_code,
        trust_remote_code=args.trust_remote_code,
    )
    if os.environ.get("RANK", "0") == "0":  # one summary, however many ranks
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(eval_report(result))
    failure = all_failed(result)
    if failure is not None:  # the files are written; the exit says there is no result
        print(f"error: {failure}", file=sys.stderr)
        return 1
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    check_installation()
    # Both load torch and transformers, which `rlvr --help` and `rlvr plugins` must not.
    from rlvr.evaluation.paths import resolve_checkpoint
    from rlvr.model.lora import export_merged

    base = None
    if args.config is not None:
        base = load_config(
            args.config,
            _host(),
            require=("model",),
            training=False,
            trust_remote_code=args.trust_remote_code,
        ).model
    out = export_merged(
        resolve_checkpoint(args.checkpoint),
        args.output,
        base=base,
        trust_remote_code=args.trust_remote_code,
    )
    print(f"wrote {out}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    config = load_config(args.config, _host(), overrides=args.overrides, training=False)
    cfg = config.data.reasoning_gym if config.data is not None else None
    if cfg is None:
        raise RlvrError(
            f"{args.config}: rlvr data writes generated data, and the config has no "
            "data.reasoning_gym (a task name and its knobs)"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    splits = {name: reasoning_gym.make_split(cfg, name) for name in reasoning_gym.SPLITS}
    shared = reasoning_gym.overlap(splits["train"].rows, splits["test"].rows)
    if shared:  # the hash split makes this impossible: a bug, not a config problem
        raise RlvrError(f"{shared} questions are in both splits; please report this")
    print(f"reasoning-gym task {cfg.task!r} {cfg.params}, seed {cfg.seed}:")
    for name, split in splits.items():
        path = out / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in split.rows)
        print(
            f"  {path}: {len(split.rows)} rows; their side of the split: {split.space.describe()}"
        )
    print("  train/test overlap: 0 questions")
    if args.space_draws > 0:
        space = reasoning_gym.task_space(cfg.task, cfg.params, seed=cfg.seed, n=args.space_draws)
        print(f"  task space: {space.describe()}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    for path in plot_run(args.output_dir):
        print(path)
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    if args.from_trl is not None:
        return _import_trl(args.from_trl, args.output, args.force, "rlvr init --from-trl")
    path = write(STARTER, args.output, force=args.force)
    print(f"wrote {path}: fill in its TODOs, then rlvr validate {path}")
    return 0


def cmd_import_trl(args: argparse.Namespace) -> int:
    script = args.script
    output = args.output or os.path.splitext(script)[0] + ".rlvr.yaml"
    return _import_trl(script, output, args.force, "rlvr import-trl")


def _import_trl(script: str, output: str, force: bool, command: str) -> int:
    path, todo = import_trl(script, output, _host(), force=force, command=f"{command} {script}")
    print(f"wrote {path} from {script} (read, not run)")
    if todo:
        print(f"needs your attention ({len(todo)}; TODO lines in the file):")
        print("\n".join(f"  - {line}" for line in todo))
    code = " --allow-code" if "name: callable" in Path(path).read_text(encoding="utf-8") else ""
    print(f"then: rlvr validate {path}{code}")
    if code:  # the opt-in: its rewards run the script's functions
        print("  (--allow-code: its callable rewards import and run the script's functions)")
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    path = new_plugin(args.name, kind=args.kind, directory=args.dir)
    print(f"wrote {path}\nnext: pip install -e '{path}[test]' && python -m pytest {path}")
    return 0


_COMMANDS = {
    "train": cmd_train,
    "validate": cmd_validate,
    "schema": cmd_schema,
    "plugins": cmd_plugins,
    "rewards": cmd_rewards,
    "env": cmd_env,
    "eval": cmd_eval,
    "export": cmd_export,
    "plot": cmd_plot,
    "data": cmd_data,
    "new": cmd_new,
    "init": cmd_init,
    "import-trl": cmd_import_trl,
}


if __name__ == "__main__":
    raise SystemExit(main())
