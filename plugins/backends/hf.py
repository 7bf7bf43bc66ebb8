"""The ``hf`` backend: batched sampling with transformers ``generate()`` on the training model.

No second copy of the weights: the generator samples with the very model being trained, so
:meth:`HFGenerator.sync_weights` has nothing to do. It is the simplest backend and the slowest
one; use it for small models, tests, and hosts without vLLM.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Iterator
from typing import Any

import torch
from transformers import (
    DynamicCache,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from rlvr._builtin import check_sampling_request, is_peft, unwrap_model
from rlvr.plugin import Generation, RunInfo, SamplingParams, autocast, eos_token_ids
from rlvr.plugins.backends.params import HFParams


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch's RNG for the block only (the global RNG state is restored afterwards)."""
    if seed is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class _SampledLogprobs(LogitsProcessor):
    """Records the log-probability of each sampled token under the distribution it was drawn
    from. Placed last among the processors, it sees the scores after temperature, top-k/p and
    the penalties; the token drawn from a step's scores is the last input id of the next call
    (or of the output, for the last step). Keeps one step's log-softmax, not all of them."""

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._take(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        if self.previous is not None:
            self.steps.append(self.previous.gather(1, tokens[:, None].long()).squeeze(1).cpu())
            self.previous = None

    def finish(self, sequences: torch.Tensor) -> list[list[float]]:
        """Per row, the log-probs of the generated tokens (as many as steps ran)."""
        self._take(sequences[:, -1])
        if not self.steps:
            return [[] for _ in range(sequences.shape[0])]
        return torch.stack(self.steps, dim=1).tolist()


def _own_warpers(config: Any) -> tuple[Any, list[LogitsProcessor]]:
    """``config`` without its sampling warpers, and those warpers as processors, in the order
    ``generate()`` would apply them. ``generate()`` puts a caller's processors before the
    warpers it builds; passing them ourselves puts the log-prob recorder after them, so it sees
    the distribution the token is drawn from (same classes, same order: same samples)."""
    if not config.do_sample:
        return config, []
    warpers: list[LogitsProcessor] = []
    if config.temperature is not None and config.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(config.temperature))
    if config.top_k:
        warpers.append(TopKLogitsWarper(top_k=config.top_k))
    if config.top_p is not None and config.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=config.top_p))
    if config.min_p is not None:
        warpers.append(MinPLogitsWarper(min_p=config.min_p))
    plain = copy.deepcopy(config)
    plain.temperature, plain.top_k, plain.top_p, plain.min_p = 1.0, 0, 1.0, None
    return plain, warpers


class HFGenerator:
    """Sample completions with ``model.generate()`` (see :class:`rlvr.api.runtime.Generator`).

    - Prompts are left-padded; completion ``i`` belongs to prompt ``i // n``.
    - At most ``params.batch_size`` sequences go into one ``generate()`` call (all when None).
    - With ``params.share_prompt_prefill`` (default), each distinct prompt of a call is run
      through the model once and its KV cache copied to its rows before ``generate()``
      decodes them all (see :meth:`_shared_prefill`): the prompt is read once per group, not
      ``n`` times. The samples are those of the unshared path (same RNG draws, log-probs equal
      to float tolerance).
    - Greedy when ``sampling.temperature == 0``; otherwise temperature/top-p/top-k/min-p
      sampling. ``repetition_penalty`` applies in both cases. Only the settings of
      ``sampling`` apply: the model's own ``generation_config`` defaults (e.g. a top_k in a
      hub ``generation_config.json``) are ignored, except its eos/bos/pad ids.
    - A completion ends after its first end-of-sequence token (kept); one with none within
      ``max_tokens`` is ``truncated``. Texts are decoded with ``skip_special_tokens=True``.
    - ``sampling.seed`` seeds torch's RNG for the call only (``torch.random.fork_rng``, so the
      training RNG is untouched): the same prompts, ``n``, seed and ``batch_size`` give the same
      completions. Without a seed, the global torch RNG is used.
    - With ``sampling.logprobs`` it also returns each sampled token's log-probability under
      the distribution it was drawn from (after temperature, top-k/p, penalties); only on
      request, so the single-turn path pays nothing (hence no ``Capabilities.sampler_logprobs``).
    - Runs under ``torch.no_grad()`` in eval mode (the model's train mode is restored after),
      and under autocast to ``run.dtype`` when that is a 16-bit dtype.
    """

    def __init__(self, params: HFParams, run: RunInfo, model: Any, tokenizer: Any):
        self.params = params
        self.run = run
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = eos_token_ids(model, tokenizer)
        if not self.eos_ids:
            raise ValueError("the tokenizer and model define no end-of-sequence token")
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]

    # ------------------------------------------------------------------ Generator protocol

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        check_sampling_request(prompts, n, sampling)
        sequences = [list(p) for p in prompts for _ in range(n)]
        if not sequences:
            return Generation(token_ids=[], texts=[], truncated=[])
        batch = self.params.batch_size or len(sequences)
        device = next(self.model.parameters()).device
        config = self._generation_config(sampling)
        token_ids: list[list[int]] = []
        truncated: list[bool] = []
        logprobs: list[list[float]] = []
        was_training = self.model.training
        saved_config = getattr(self.model, "generation_config", None)
        self.model.eval()
        try:
            # A clean generation_config, so no default of the model's leaks into sampling.
            self.model.generation_config = self._base_config(saved_config)
            # In the run's compute dtype: trained weights are float32 (rlvr.model.loading.autocast).
            with torch.no_grad(), _seeded(sampling.seed, device), autocast(device, self.run.dtype):
                for start in range(0, len(sequences), batch):
                    chunk = sequences[start : start + batch]
                    for ids, cut, lp in self._generate_chunk(
                        chunk, config, device, sampling.logprobs
                    ):
                        token_ids.append(ids)
                        truncated.append(cut)
                        logprobs.append(lp)
        finally:
            self.model.generation_config = saved_config
            self.model.train(was_training)
        texts = self.tokenizer.batch_decode(
            token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return Generation(
            token_ids=token_ids,
            texts=texts,
            truncated=truncated,
            logprobs=logprobs if sampling.logprobs else None,
        )

    def sync_weights(self, model: Any) -> None:
        """Nothing to do when generation uses the training model itself; a copy of it (the
        asynchronous rollouts' own, ``training.max_staleness``) takes its weights."""
        mine, trained = unwrap_model(self.model), unwrap_model(model)
        if mine is not trained:
            with torch.no_grad():
                mine.load_state_dict(trained.state_dict())

    def close(self) -> None:
        """Drop the references to the model and tokenizer (nothing else is held)."""
        self.model = None
        self.tokenizer = None

    # ------------------------------------------------------------------ internals

    def _base_config(self, saved: Any) -> Any:
        return GenerationConfig(
            bos_token_id=getattr(saved, "bos_token_id", None),
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
        )

    def _generation_config(self, sampling: SamplingParams) -> Any:
        sample = sampling.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens,
            "do_sample": sample,
            "num_beams": 1,
            "repetition_penalty": sampling.repetition_penalty,
            "eos_token_id": self.eos_ids,
            "pad_token_id": self.pad_id,
            "use_cache": self.params.use_cache,
        }
        if sample:
            # Explicit values: None would let transformers' global defaults in (top_k=50).
            kwargs.update(
                temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k
            )
            if sampling.min_p > 0:
                kwargs["min_p"] = sampling.min_p
        return GenerationConfig(**kwargs)

    def _generate_chunk(
        self, chunk: list[list[int]], config: Any, device: torch.device, logprobs: bool
    ) -> list[tuple[list[int], bool, list[float]]]:
        width = max(len(p) for p in chunk)
        input_ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, prompt in enumerate(chunk):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        recorder = _SampledLogprobs() if logprobs else None
        extra: dict[str, Any] = {}
        if self.params.share_prompt_prefill and self.params.use_cache:
            cache = self._shared_prefill(chunk, input_ids, attention_mask, device)
            if cache is not None:
                extra["past_key_values"] = cache
        if recorder is not None:
            config, warpers = _own_warpers(config)
            extra["logits_processor"] = LogitsProcessorList([*warpers, recorder])
        out = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=config,
            **extra,
        )
        new_tokens = out[:, width:].tolist()
        scores = recorder.finish(out) if recorder is not None else [[] for _ in new_tokens]
        eos = set(self.eos_ids)
        results = []
        for row, lp in zip(new_tokens, scores, strict=True):
            end = next((j for j, tok in enumerate(row) if tok in eos), None)
            if end is None:
                # generate() only stops a row early at an eos, so this row is max_tokens long.
                results.append((row, True, lp[: len(row)]))
            else:
                results.append((row[: end + 1], False, lp[: end + 1]))
        return results

    def _shared_prefill(
        self,
        chunk: list[list[int]],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        device: torch.device,
    ) -> Any:
        """The KV cache of every row's prompt but its last token, each distinct prompt computed
        once (None when no prompt repeats, or a prompt is one token wide: nothing to share).

        The distinct prompts run in one forward pass, left-padded to the chunk's width like
        ``generate()`` would pad them, with the position ids ``generate()`` derives from the
        mask; their cache is then indexed along the batch dim to one entry per row. Given this
        cache, ``generate()`` only runs the last prompt token (it slices the input to what the
        cache lacks) and decodes as usual: same logits processors, same draws from the RNG,
        same early stop once every row has ended. The last token is left to ``generate()`` so
        its first step is the one that produces the first token's scores."""
        width = input_ids.shape[1]
        if width < 2:
            return None
        distinct: dict[tuple[int, ...], int] = {}  # prompt -> its index among the distinct
        first: list[int] = []  # the distinct prompts' first rows
        owner: list[int] = []  # each row's distinct prompt
        for row, prompt in enumerate(chunk):
            if tuple(prompt) not in distinct:
                distinct[tuple(prompt)] = len(first)
                first.append(row)
            owner.append(distinct[tuple(prompt)])
        if len(first) == len(chunk):
            return None
        ids = input_ids[first, :-1].to(device)
        mask = attention_mask[first, :-1].to(device)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        # The transformers model itself (a peft model's base model carries the adapters), so
        # its own keyword arguments are available: ``logits_to_keep=1`` skips the lm_head on
        # all but one position (the logits of this pass are not used).
        inner = unwrap_model(self.model)
        model = inner.get_base_model() if is_peft(inner) else inner
        extra = {}
        if "logits_to_keep" in inspect.signature(model.forward).parameters:
            extra["logits_to_keep"] = 1
        cache = DynamicCache(config=model.config.get_text_config(decoder=True))
        model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            **extra,
        )
        cache.batch_select_indices(torch.tensor(owner, dtype=torch.long, device=device))
        return cache


__all__ = ["HFGenerator"]
