"""The bodies of the ``rlvr`` commands (``cmd_<name>``, one per command; :data:`COMMANDS` maps a
command's name to its body): each calls the library and prints what a user reads.

Heavy modules (torch, transformers, datasets: the evaluator, LoRA export, the reward pool) are
imported inside the commands that need them, so ``rlvr --help`` and ``rlvr plugins`` answer in a
fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.api.errors import RlvrError
from rlvr.api.host import PluginHost, create_host
from rlvr.cli.scaffold import new_plugin
from rlvr.cli.starter import STARTER
from rlvr.compat.trl.importer import import_trl, write
from rlvr.config.schema import dump, json_schema, load_config
from rlvr.data import reasoning_gym
from rlvr.evaluation.report import all_failed
from rlvr.evaluation.report import report as eval_report
from rlvr.model.installation import check_installation
from rlvr.outputs.plot import plot_run
from rlvr.runs import evaluate, plugin_host, train, validate


def _host() -> PluginHost:
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
    data = config.data
    cfg: Any = None if data is None else data.reasoning_gym
    if data is not None and data.source == "reasoning_gym":  # the long spelling
        cfg = data.params
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


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
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
