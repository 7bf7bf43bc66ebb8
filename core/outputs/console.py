"""What third-party libraries print on rlvr's console, the same for ``rlvr`` commands and the
Python API (``rlvr.train``, ``rlvr.Trainer``, ``rlvr.evaluate``).

Their progress bars (weights loading, dataset preparation, GGUF dequantizing) and vLLM's INFO
and WARNING lines say nothing about the run and bury its own lines; they are hidden unless the
user asks for them: ``-v`` on the command line, or the libraries' own environment variables,
which always win (:data:`QUIET`).
"""

from __future__ import annotations

import logging
import os
import sys

#: Each variable and its value while hidden. vLLM applies ``VLLM_LOGGING_LEVEL`` when an engine
#: starts (the ``vllm`` backend builds it after this ran); at ``ERROR`` its errors stay visible.
QUIET: dict[str, str] = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "VLLM_LOGGING_LEVEL": "ERROR",
}

_shown = False  # `rlvr -v`: the calls of the Python API that the command makes leave them be


def quiet_third_party(*, verbose: bool = False) -> None:
    """Hide third-party progress bars and vLLM's INFO/WARNING logs, except where the user set
    the variable; ``verbose`` (``rlvr -v``) leaves them shown for the rest of the process. A
    library imported before this ran (a script that loaded ``datasets`` itself) has read its
    variable already, so it is told directly."""
    global _shown
    _shown = _shown or verbose
    if _shown:
        return
    for name, value in QUIET.items():
        if name in os.environ:  # the user's choice
            continue
        os.environ[name] = value
        if name == "VLLM_LOGGING_LEVEL":
            # vLLM applies the level when an engine starts; what it logs on import before
            # that (no triton CPU backend, ...) reaches Python's last-resort handler
            logging.getLogger("vllm").setLevel(value)
        elif name == "HF_HUB_DISABLE_PROGRESS_BARS":
            if "huggingface_hub" in sys.modules:
                from huggingface_hub.utils import disable_progress_bars  # loaded already

                disable_progress_bars()
            if "transformers" in sys.modules:
                from transformers.utils import logging as transformers_logging  # loaded already

                transformers_logging.disable_progress_bar()
        elif name == "HF_DATASETS_DISABLE_PROGRESS_BARS" and "datasets" in sys.modules:
            from datasets.utils import disable_progress_bars as disable_datasets_bars  # loaded

            disable_datasets_bars()


__all__ = ["QUIET", "quiet_third_party"]
