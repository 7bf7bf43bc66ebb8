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
import warnings
from collections.abc import Sequence
from typing import Any

from rlvr import __version__
from rlvr.api.errors import ConfigWarning, RlvrError
from rlvr.api.host import Host, PluginError, create_host
from rlvr.cli.scaffold import new_plugin
from rlvr.config.schema import ConfigError, dump, json_schema, load_config
from rlvr.model.installation import check_installation
from rlvr.runs import evaluate, plugin_host, train, validate

NPROC_HELP = (
    "data-parallel processes on this machine (as torchrun --standalone --nproc-per-node N "
    "-m rlvr ...; for several nodes run torchrun itself)"
)
#: The commands that load a model (or its tokenizer): they check the installation first.
MODEL_COMMANDS = ("train", "eval", "export", "validate")


def _add_config(p: argparse.ArgumentParser, *, positional: bool = True) -> None:
    if positional:
        p.add_argument("config", help="run config (.yaml, .yml or .toml)")
    else:
        p.add_argument("--config", "-c", required=True, help="run config (.yaml or .toml)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set training.seed=1 (repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr",
        description="Reinforcement learning of language models with verifiable rewards.",
    )
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show third-party progress bars and logs"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train a policy from a config")
    _add_config(p)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        metavar="N",
        help=NPROC_HELP,
    )

    p = sub.add_parser("validate", help="check a config; print it resolved, or every problem")
    _add_config(p)

    sub.add_parser("schema", help="print the JSON Schema of a config (installed plugins)")

    p = sub.add_parser("plugins", help="list plugins, what they register, and failures")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    rewards = sub.add_parser("rewards", help="reward tools").add_subparsers(
        dest="rewards_command", required=True, metavar="COMMAND"
    )
    p = rewards.add_parser("score", help="score a JSONL file of completions")
    _add_config(p, positional=False)
    p.add_argument("--input", "-i", required=True, help="JSONL rows with a `completion` field")
    p.add_argument("--output", "-o", required=True, help="where to write the scored rows")
    p.add_argument("--workers", type=int, default=None, help="reward worker processes")
    p.add_argument("--batch-size", type=int, default=256, help="rows per scoring batch")

    p = sub.add_parser("eval", help="generate on an eval split and score (pass@1, pass@k)")
    _add_config(p)
    p.add_argument("--checkpoint", help="checkpoint dir (default: the config's model)")
    p.add_argument("--split", default=None, help="eval split (default data.eval_split)")
    p.add_argument("-k", type=int, default=1, help="samples per prompt for pass@k")
    p.add_argument(
        "--greedy",
        action="store_true",
        help="decode greedily, as the in-training eval does by default (the same as --set "
        "training.temperature=0; otherwise the training sampling settings)",
    )
    p.add_argument("--limit", type=int, default=None, help="evaluate the first N prompts")
    p.add_argument("--output", default=None, help="samples JSONL (default OUTPUT_DIR/eval)")
    p.add_argument("--metric", default=None, help="reward label that decides correctness")
    p.add_argument("--threshold", type=float, default=None, help="correct when >= this")
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N", help=NPROC_HELP)

    p = sub.add_parser(
        "export", help="write a checkpoint (LoRA adapters merged in) as a plain HF model"
    )
    p.add_argument("checkpoint", help="a checkpoint dir, or a run's output_dir (its latest)")
    p.add_argument("output", help="new directory for the model and tokenizer")
    p.add_argument(
        "--config", default=None, help="run config naming the base model (default: the one saved)"
    )

    p = sub.add_parser("plot", help="draw a run's curves to PNG")
    p.add_argument("output_dir", help="a run's output_dir (holds metrics.jsonl)")

    new = sub.add_parser("new", help="scaffold a new package").add_subparsers(
        dest="new_command", required=True, metavar="WHAT"
    )
    p = new.add_parser("plugin", help="write a ready-to-install plugin package")
    p.add_argument("name", help="plugin name, e.g. my_reward")
    p.add_argument("--kind", choices=["reward", "algorithm", "backend"], required=True)
    p.add_argument("--dir", default=".", help="where to create the package")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.simplefilter("default")
    if getattr(args, "nproc_per_node", 1) > 1 and "WORLD_SIZE" not in os.environ:
        return _torchrun(argv, args.nproc_per_node)
    warnings.showwarning = _show_warning
    if not args.verbose:  # weights loading, dataset split generation: noise for a user
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    try:
        if args.command in MODEL_COMMANDS:
            check_installation()
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
    config = validate(args.config, overrides=args.overrides, host=host)
    print(dump(config), end="")
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
    for plugin in plugins:
        origin = f"{plugin['dist']} {plugin['version']}" if plugin["dist"] else "in-process"
        print(f"{plugin['name']}  ({origin})")
        for item in plugin["registers"]:
            print(f"  {item['kind']:<9} {item['name']:<16} {item['description']}")
    if failures:
        print("\nfailed plugins:")
        for f in host.failures:
            print(f"  {f}")
    return 0


def cmd_rewards(args: argparse.Namespace) -> int:
    # Loads tqdm and the reward worker pool (multiprocessing), which `rlvr --help` and
    # `rlvr plugins` do not need: together a third of their time.
    from rlvr.rewards.score_file import score_file

    host = _host()
    config = load_config(
        args.config, host, overrides=args.overrides, require=("rewards",), training=False
    )
    workers = args.workers if args.workers is not None else config.training.reward_workers
    report = score_file(
        config, host, args.input, args.output, workers=workers, batch_size=args.batch_size
    )
    print(report.table())
    for line in report.bad_rows:
        print(f"warning: {line}", file=sys.stderr)
    return 0 if report.scored else 1


def cmd_train(args: argparse.Namespace) -> int:
    host = _host()
    train(args.config, overrides=args.overrides, resume=args.resume, host=host)
    return 0


def _torchrun(argv: Sequence[str] | None, nproc: int) -> int:
    """``rlvr train|eval --nproc-per-node N``: the same command under torchrun (one machine)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={nproc}", "-m", "rlvr"]
    return subprocess.call(cmd + list(sys.argv[1:] if argv is None else argv))


def cmd_eval(args: argparse.Namespace) -> int:
    # Loads torch with the evaluator, which `rlvr --help` and `rlvr plugins` must not.
    from rlvr.evaluation.evaluate import headline

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
    )
    if os.environ.get("RANK", "0") == "0":  # one summary, however many ranks
        print(json.dumps(result, indent=2))
        print(headline(result), file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    # Both load torch and transformers, which `rlvr --help` and `rlvr plugins` must not.
    from rlvr.evaluation.evaluate import resolve_checkpoint
    from rlvr.model.lora import export_merged

    base = None
    if args.config is not None:
        base = load_config(args.config, _host(), require=("model",), training=False).model
    out = export_merged(resolve_checkpoint(args.checkpoint), args.output, base=base)
    print(f"wrote {out}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    # Loads tqdm and the reward worker pool with rlvr.outputs.metrics: see cmd_rewards.
    from rlvr.outputs.plot import plot_run

    for path in plot_run(args.output_dir):
        print(path)
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
    "eval": cmd_eval,
    "export": cmd_export,
    "plot": cmd_plot,
    "new": cmd_new,
}


if __name__ == "__main__":
    raise SystemExit(main())
