"""The ``rlvr`` command line's entry point (``rlvr = rlvr.cli.main:main``): parse the arguments
(:mod:`rlvr.cli.parser`), run the command's body (:mod:`rlvr.cli.commands`) and turn rlvr's
errors into a message and an exit code; which warnings reach the console; and ``--nproc-per-node``,
the same command again under torchrun.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Sequence

from rlvr.api.errors import ConfigWarning, RlvrError
from rlvr.api.host import PluginError
from rlvr.cli.commands import COMMANDS
from rlvr.cli.parser import parse_args
from rlvr.config.schema import ConfigError
from rlvr.outputs.console import quiet_third_party
from rlvr.parallel.launcher import LAUNCHER_ENV, die_with_parent


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
        return COMMANDS[args.command](args)
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


if __name__ == "__main__":
    raise SystemExit(main())
