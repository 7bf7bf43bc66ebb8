"""``rlvr import-trl``: a run config from a TRL script (:func:`import_trl`).

``rlvr import-trl SCRIPT.py`` reads a TRL GRPO training script's syntax tree; it never runs
the script (nor imports it). From it:

- the ``GRPOConfig(...)`` keyword arguments go, as written, under ``trl:`` (TRL's keys and
  units, which rlvr translates); a value that is not a literal (``args.lr``) becomes a TODO
  comment, as does every key that rlvr ignores (with why) or rejects (with the fix), so the
  config validates;
- the model from ``GRPOTrainer(model=...)``, a string or a ``from_pretrained("...")``;
  ``peft_config=LoraConfig(...)`` becomes ``model.lora``;
- ``reward_funcs=[...]``: each function defined in the script becomes a ``callable`` reward
  entry pointing at ``SCRIPT.py:name``, each imported one at ``module:name`` (with ``format:
  conversational`` when the function reads ``completion[0]["content"]``), each string (a
  model path or hub id, which TRL loads as a reward model) a ``reward_model`` entry; GRPOConfig's
  ``reward_weights`` become the entries' weights. A reward worker imports the file a
  ``callable`` names, so when importing the script would run more than definitions (a TRL
  script usually trains at its top level, or imports trl where it is not installed), its
  reward functions and what they use are copied to ``CONFIG_rewards.py`` beside the config,
  and the entries point there;
- ``train_dataset``, followed back to ``load_dataset("...")``, becomes ``data.path`` (and
  ``data.split``), with a TODO where the script changes the rows (``.map(...)``).

Names are followed back through plain assignments (``model_name = "Qwen/..."``). What cannot be
read this way is a TODO line in the YAML and a line of the report.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import yaml

from rlvr.api.errors import RlvrError
from rlvr.api.host import PluginHost
from rlvr.compat.trl.paste import TRL_SECTION
from rlvr.compat.trl.read import read_script
from rlvr.compat.trl.script import Script
from rlvr.config.schema import DEFAULT_ALGORITHM, DEFAULT_BACKEND, ConfigError, validate


def _value(value: Any) -> str:
    """``value`` as one line of YAML."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _sections(script: Script) -> dict[str, Any]:
    data: dict[str, Any] = {"model": {"name_or_path": script.model}}
    if script.lora is not None:
        data["model"]["lora"] = script.lora
    data["data"] = dict(script.data) or {"path": None}
    data["rewards"] = script.rewards
    data[TRL_SECTION] = dict(script.trl)
    return data


#: The sections rlvr train needs (algorithm and backend get their defaults).
REQUIRE = ("model", "data", "rewards", "algorithm", "backend")


def check(script: Script, host: PluginHost, config_dir: Path) -> list[str]:
    """Validate the config as ``rlvr validate`` does before reading files and models: each
    ``trl:`` key rlvr ignores or rejects becomes a comment saying why (so the config
    validates); returns what else is wrong, one line each."""
    left: list[str] = []
    for _ in range(len(script.trl) + 1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                validate(_sections(script), host, require=REQUIRE, config_dir=config_dir)
                problems: list[tuple[str, str]] = []
            except ConfigError as exc:
                problems = exc.problems
        moved = False
        for w in caught:
            key, _, why = str(w.message).partition(" is ignored: ")
            key = key.removeprefix(f"{TRL_SECTION}.")
            if why and key in script.trl:
                script.trl_comments[key] = (_value(script.trl.pop(key)), f"ignored: {why}")
                moved = True
        for path, message in problems:
            key = path.removeprefix(f"{TRL_SECTION}.").split(".")[0]
            if path.startswith(f"{TRL_SECTION}.") and key in script.trl:
                script.trl_comments[key] = (_value(script.trl.pop(key)), f"TODO: {message}")
                moved = True
        left = [f"{p}: {m}" for p, m in problems if not p.startswith(f"{TRL_SECTION}.")]
        left += [str(w.message) for w in caught if " is ignored: " not in str(w.message)]
        if not moved:
            break
    return left


def render(script: Script, command: str) -> str:
    """The config YAML: the sections, and TODO comments where the script said no more."""
    lines = [
        f"# Written by `{command}` from the script's text (the script was not run).",
        "# Check the TODO lines, then: rlvr validate THIS.yaml && rlvr train THIS.yaml (with",
        "# --allow-code when its rewards are the script's functions: `callable` runs them)",
    ]

    def todos(section: str, indent: str) -> None:
        lines.extend(f"{indent}# TODO: {t}" for t in script.todos.get(section, []))

    lines += ["model:", f"  name_or_path: {_value(script.model)}"]
    if script.lora is not None:
        lines.append("  lora:  # from peft_config=LoraConfig(...)")
        lines += [f"    {k}: {_value(v)}" for k, v in script.lora.items()]
    todos("model", "  ")
    lines.append("data:")
    lines += [f"  {k}: {_value(v)}" for k, v in (dict(script.data) or {"path": None}).items()]
    todos("data", "  ")
    lines.append("rewards:" + ("" if script.rewards else " []"))
    lines += [f"  # {note}" for note in script.notes]
    for entry in script.rewards:
        what = {
            "callable": "your function, called as TRL calls it",
            "reward_model": "a reward model, scored as TRL scores it",
        }.get(entry["name"], "")
        lines.append(f"  - name: {entry['name']}" + (f"  # {what}" if what else ""))
        lines += [f"    {k}: {_value(v)}" for k, v in entry.items() if k not in ("name", "params")]
        lines.append("    params:")
        for key, value in entry["params"].items():
            why = "  # it reads completion[0]['content']" if key == "format" else ""
            lines.append(f"      {key}: {_value(value)}{why}")
    todos("rewards", "  ")
    lines += [
        f"# algorithm: {DEFAULT_ALGORITHM} and backend: {DEFAULT_BACKEND} (transformers' "
        "generate) are the defaults;",
        "# trl: below picks the loss (loss_type) and vLLM (use_vllm: true).",
        f"{TRL_SECTION}:  # the script's GRPOConfig: TRL's keys and units (rlvr translates them)",
    ]
    lines += [f"  {k}: {_value(v)}" for k, v in script.trl.items()]
    lines += [f"  # {k}: {shown}  # {why}" for k, (shown, why) in script.trl_comments.items()]
    todos(TRL_SECTION, "  ")
    if lines[-1].startswith(f"{TRL_SECTION}:"):
        lines[-1] = f"{TRL_SECTION}: {{}}"
    return "\n".join(lines) + "\n"


def attention(script: Script, left: list[str]) -> list[str]:
    """One line per thing the user has to look at."""
    out = [t for section in script.todos.values() for t in section]
    out += [
        f"trl.{key}: {why.removeprefix('TODO: ')}"
        for key, (_, why) in script.trl_comments.items()
        if why.startswith("TODO")
    ]
    return out + left


def write(text: str, output: str | Path, *, force: bool) -> Path:
    """Write ``text`` to ``output`` (never over a file, unless ``force``)."""
    path = Path(output)
    if path.exists() and not force:
        raise RlvrError(f"{str(path)!r} exists; pass --force to replace it, or -o another path")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def import_trl(
    script: str | Path,
    output: str | Path,
    host: PluginHost,
    *,
    force: bool = False,
    command: str = "",
) -> tuple[Path, list[str]]:
    """Write the config for the TRL ``script`` to ``output``; return its path and the lines
    that need the user's attention."""
    out_dir = Path(output).absolute().parent
    if not Path(script).is_file():
        raise RlvrError(f"no file {str(script)!r} (rlvr import-trl SCRIPT.py)")
    if Path(output).exists() and not force:
        raise RlvrError(f"{str(output)!r} exists; pass --force to replace it, or -o another path")
    read = read_script(script, output)
    if read.module is not None:  # first: the config check reads it
        module, source = read.module
        if module.exists() and not force:
            raise RlvrError(
                f"{str(module)!r} exists; pass --force to replace it, or -o another path"
            )
        write(source, module, force=True)
    left = check(read, host, out_dir)
    text = render(read, command or f"rlvr import-trl {script}")
    return write(text, output, force=force), read.notes + attention(read, left)
