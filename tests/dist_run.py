"""Run ``rlvr.train`` with the test plugins, in one process or as a torchrun rank.

``python tests/dist_run.py CONFIG.json [--resume | --eval OUTPUT]`` or, the same arguments,
``torchrun --nproc-per-node 2 tests/dist_run.py``. The config is the raw run config; the host
adds two test plugins:

- backend ``by_prompt``: completions that depend only on the prompt and the completion's
  index within its group (a seeded choice of short arithmetic answers), so a prompt gets the
  same completions on any rank, in any round, in any process: generation is replayed
  exactly, which is what comparing 1 process with N ranks needs;
- reward ``toy`` (as in test_trainer): different scores within a group; ``flat_if_odd`` makes
  the groups of odd answers flat, so DAPO's dynamic sampling drops them.

Test hook (environment): ``RLVR_TEST_DIE_RANK`` (and ``RLVR_TEST_DIE_CALL``, default 1): that
rank SIGKILLs itself in its N-th generate call (one per step without dynamic sampling).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import sys
from typing import Any

from rlvr.api.host import create_host
from rlvr.api.registration import Backend, Capabilities, Params, Reward
from rlvr.api.runtime import Generation, SamplingParams
from rlvr.config.schema import load_config
from rlvr.plugin import hookimpl
from rlvr.training.launch import train

ANSWERS = ["7", "The answer is 5", "12", "x", "4 + 4 = 8", "no idea", "3", "10 10"]


class ByPromptParams(Params):
    pass


class ByPromptGenerator:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos = int(tokenizer.eos_token_id)
        self.calls = 0

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        self.calls += 1
        die_rank = os.environ.get("RLVR_TEST_DIE_RANK")
        die_call = int(os.environ.get("RLVR_TEST_DIE_CALL", "1"))
        if die_rank is not None and os.environ.get("RANK") == die_rank and self.calls >= die_call:
            os.kill(os.getpid(), signal.SIGKILL)
        token_ids, texts, truncated = [], [], []
        for ids in prompts:
            for k in range(n):
                digest = hashlib.sha256(json.dumps([ids, k]).encode()).digest()
                text = ANSWERS[digest[0] % len(ANSWERS)] + " " * (digest[1] % 3)
                toks = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
                toks = toks[: sampling.max_tokens - 1] + [self.eos]
                token_ids.append(toks)
                texts.append(self.tokenizer.decode(toks, skip_special_tokens=True))
                truncated.append(False)
        return Generation(token_ids=token_ids, texts=texts, truncated=truncated)

    def sync_weights(self, model: Any) -> None:
        pass

    def close(self) -> None:
        pass


class ToyParams(Params):
    flat_if_odd: bool = False


def _toy(params: ToyParams, sample: Any) -> float:
    text = sample.completion
    if params.flat_if_odd and int(sample.row["answer"]) % 2:
        return 0.0
    digits = sum(ch.isdigit() for ch in text) / max(len(text), 1)
    return digits + (1.0 if sample.row["answer"] in text else 0.0) + 0.01 * len(text)


def toy_factory(params: ToyParams) -> Any:
    return functools.partial(_toy, params)


class TestPlugins:
    @hookimpl
    def rlvr_register_backends(self, register: Any) -> None:
        register(
            Backend(
                name="by_prompt",
                params=ByPromptParams,
                factory=lambda params, run, model, tokenizer: ByPromptGenerator(tokenizer),
                description="completions fixed by the prompt (tests)",
                capabilities=Capabilities(sampler_logprobs=False, reference_logprobs=True),
            )
        )

    @hookimpl
    def rlvr_register_rewards(self, register: Any) -> None:
        register(
            Reward(
                name="toy",
                params=ToyParams,
                factory=toy_factory,
                description="digits, plus 1 when the completion contains the answer",
                fields=lambda params: ("answer",),
            )
        )


def main(path: str, args: list[str]) -> None:
    """``CONFIG.json [--resume]`` trains; ``CONFIG.json --eval OUTPUT`` runs ``rlvr eval`` on
    the data file with k=2, correct when ``toy >= 1``."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    host = create_host(plugins=[TestPlugins()])
    config = load_config(raw, host, require=("model", "data", "rewards", "algorithm", "backend"))
    if "--eval" in args:
        from rlvr.evaluation.evaluate import evaluate

        output = args[args.index("--eval") + 1]
        split = raw["data"]["path"]
        evaluate(config, host, split=split, k=2, output=output, metric="toy", threshold=1.0)
        return
    train(config, host, resume="--resume" in args, progress=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
