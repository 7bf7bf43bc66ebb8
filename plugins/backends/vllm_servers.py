"""The ``vllm`` backend's server mode (``backend.params.mode: server``): `vllm serve` processes
that rlvr starts or connects to, sampled over HTTP and fed each update's weights through vLLM's
weight-transfer API (``rlvr_shm``: :mod:`rlvr.plugins.backends.vllm_engine`; servers on other
machines: vLLM's ``nccl``, :mod:`rlvr.plugins.backends.vllm_nccl`).

One request per completion, seeded as the colocated engine seeds it (:func:`completion_seed`), so a
server and a colocated engine with the same weights sample the same tokens; all the completions of
a prompt go to one server, whose prefix cache then holds the prompt once. Each server holds a
weight version (the number of updates pushed); before sampling, a server that holds another version
(restarted, or fed by someone else) gets the current weights again. A server that stops answering
loses its requests to the others; with none left, the call waits up to ``request_timeout`` for one
to come back, then fails the step. A LoRA policy's adapter goes alone after each update
(``lora_sync``, :mod:`rlvr.plugins.backends.vllm_lora`): the base weights once, then the adapter
through vLLM's ``/v1/load_lora_adapter``, in place. With ``in_flight_updates: pause`` an update
does not wait for the requests in flight: the servers pause them (``/pause?mode=keep``), take the
weights and resume them. The servers rlvr started die with it: their own process group, stopped on
``close``, at exit, and by the kernel when the trainer dies (``PR_SET_PDEATHSIG``). Several
trainer ranks (torchrun) share the servers: rank 0 starts them (or takes the URLs) and sends the
weights; the other ranks learn the URLs from it and, before sampling, wait until the servers
hold the version they expect.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist
from safetensors.torch import save_file

from rlvr._builtin import check_sampling_request, hf_weights, is_peft, unwrap_model
from rlvr.plugin import Generation, PluginError, RunInfo, SamplingParams, eos_token_ids
from rlvr.plugins.backends.params import VLLMParams
from rlvr.plugins.backends.vllm import (
    VLLMGenerator,
    completion_seed,
    engine_files,
    request_settings,
    shared_memory,
)
from rlvr.plugins.backends.vllm_api import ENGINE, NCCL_ENGINE, ServerDown, call
from rlvr.plugins.backends.vllm_lora import ADAPTER_NAME, AdapterDir, EngineLora, engine_lora

logger = logging.getLogger(__name__)

SERVED_NAME = "rlvr-policy"
#: what :meth:`ServerGenerator._held` returns for a server that did not answer
_LOST = "<lost>"
#: Linux's prctl option: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


# --------------------------------------------------------------------------- the processes


def _die_with_parent() -> None:
    """In the server's process before exec: SIGTERM when the trainer dies, however it dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StartedServer:
    """One `vllm serve` process rlvr started, in its own process group, logging to a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*argv, "--port", str(self.port)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends the engine too
                preexec_fn=_die_with_parent,
            )

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PluginError(
                    f"the vLLM server rlvr started exited with code {self.proc.returncode} "
                    f"before it was ready; its log ({self.log}) ends:\n{self.tail()}"
                )
            with contextlib.suppress(ServerDown, PluginError):
                call(self.url, "/health", timeout=5)
                return
            time.sleep(1.0)
        self.stop()
        raise PluginError(
            f"the vLLM server rlvr started did not answer /health within {timeout:g} s "
            f"(backend.params.startup_timeout); its log ({self.log}) ends:\n{self.tail()}"
        )

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def terminate(self) -> None:
        """SIGTERM to its process group, without waiting for it to exit."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        """:meth:`terminate`, then wait for it to exit (SIGKILL after 30 s)."""
        if self.proc.poll() is not None:
            return
        self.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def server_argv(
    params: VLLMParams, run: RunInfo, files: Any, cpus: str | None, lora: EngineLora | None = None
) -> list[str]:
    """The `vllm serve` command of one server rlvr starts (its port is added when started)."""
    max_len = params.max_model_len
    if max_len is None and run.max_prompt_length:
        max_len = run.max_prompt_length + max(
            run.max_completion_length, run.max_episode_tokens or 0
        )
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    argv += ["--model", str(files.model_dir), "--tokenizer", str(files.tokenizer_dir)]
    argv += ["--load-format", files.load_format, "--served-model-name", SERVED_NAME]
    argv += ["--host", "127.0.0.1", "--dtype", run.dtype]
    argv += [
        "--weight-transfer-config",
        NCCL_ENGINE if params.weight_transfer == "nccl" else ENGINE,
    ]
    argv += ["--seed", str(params.seed if params.seed is not None else run.seed)]
    argv += ["--logprobs-mode", f"{params.logprobs_mode}_logprobs"]
    argv += ["--max-num-seqs", str(params.max_num_seqs)]
    if max_len is not None:
        argv += ["--max-model-len", str(max_len)]
    if not params.enable_prefix_caching:
        argv += ["--no-enable-prefix-caching"]
    if run.device == "cpu":
        # As the colocated engine: vLLM CPU fails on seeded requests whose prefill is chunked.
        tokens = params.max_num_batched_tokens or max(8192, max_len or 0)
        argv += ["--enforce-eager", "--no-enable-chunked-prefill"]
        argv += ["--max-num-batched-tokens", str(tokens)]
    elif params.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(params.max_num_batched_tokens)]
    if lora is not None:
        argv += lora.server_args()
    argv += params.server_args
    return ["taskset", "-c", cpus, *argv] if cpus else argv


# --------------------------------------------------------------------------- the generator


class ServerGenerator:
    """Sample from vLLM servers (see the module docstring and :class:`rlvr.plugin.Generator`)."""

    def __init__(self, params: VLLMParams, run: RunInfo, model: Any, tokenizer: Any):
        self.params = params
        self.tokenizer = tokenizer
        base = unwrap_model(model)
        base = base.get_base_model() if is_peft(base) else base
        self.eos_ids = eos_token_ids(base, tokenizer)
        if not self.eos_ids:
            raise ValueError("the tokenizer and model define no end-of-sequence token")
        nccl = params.weight_transfer == "nccl"
        if nccl and not run.device.startswith("cuda"):
            raise PluginError(
                f"backend.params.weight_transfer: nccl needs the trainer on CUDA (this run is on "
                f"{run.device}); use weight_transfer: shm for servers on the trainer's machine"
            )
        #: the NCCL group with the servers (weight_transfer: nccl, rank 0)
        self._nccl: Any = None
        self.started: list[StartedServer] = []
        self._files: Any = None
        #: the adapter's way to the servers (None: merged weights; always over NCCL: an adapter
        #: goes as a file)
        lora_sync = "merged" if nccl else params.lora_sync  # (params refuse adapter + nccl)
        self.lora = engine_lora(model, lora_sync, run.device)
        self._adapter_dir: AdapterDir | None = None
        self.version = 0
        self._model: Any = None
        self._alive_lock = threading.Lock()
        #: set by close(): requests still waiting for a server give up (an aborted run exits)
        self._closed = threading.Event()
        #: each server's /metrics counters (_COUNTERS) when last read
        self._counters_seen: dict[str, dict[str, float]] = {}
        #: a generate() may run while weights are pushed (in_flight_updates: pause)
        self.takes_weights_in_flight = params.in_flight_updates == "pause"
        self._push_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rlvr-vllm")
        #: pushes have their own threads: the requests a pause holds may fill the pool's
        self._push_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rlvr-vllm-push")
        #: several trainer ranks share the servers: rank 0 starts them and sends the weights,
        #: the others wait for the servers to hold the version they expect
        self.rank = tdist.get_rank() if tdist.is_available() and tdist.is_initialized() else 0
        atexit.register(self.close)
        try:
            self.urls = self._shared(lambda: list(params.urls) or self._start(params, run, model))
            self.alive = list(self.urls)
            self.model_names = {url: self._served_name(url) for url in self.urls}
            if self.rank == 0 and nccl:
                self._nccl = self._join_nccl(model, run)
            elif self.rank == 0:
                for url in self.urls:
                    self._check_weight_api(url)
            self._model = model
            self.version = 1
            if self.rank == 0:
                self._push(model, list(self.alive), base=True)
        except BaseException:
            self.close()
            raise

    def _shared(self, start: Any) -> list[str]:
        """The servers' URLs: ``start()``'s on rank 0, sent to every other rank."""
        if self.rank == 0 and not (tdist.is_available() and tdist.is_initialized()):
            return list(start())
        message: list[Any] = [None]
        if self.rank == 0:
            try:
                message = [list(start())]
            except BaseException as exc:
                message = [f"rank 0 could not start the vLLM servers: {exc}"]
                tdist.broadcast_object_list(message, src=0)
                raise
        tdist.broadcast_object_list(message, src=0)
        if isinstance(message[0], str):
            raise PluginError(message[0])
        return list(message[0])

    def _start(self, params: VLLMParams, run: RunInfo, model: Any) -> list[str]:
        self._files = engine_files(model, self.tokenizer)
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_ALLOW_RUNTIME_LORA_UPDATING="1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(params.kv_cache_space_gb))))
        logs = Path(run.output_dir or tempfile.gettempdir()) / "vllm-servers"
        for i in range(params.servers):
            cpus = params.server_cpus[i] if params.server_cpus else None
            argv = server_argv(params, run, self._files, cpus, self.lora)
            self.started.append(StartedServer(argv, env, logs / f"server-{i}.log"))
        for server in self.started:
            server.wait_ready(params.startup_timeout)
        return [s.url for s in self.started]

    def _served_name(self, url: str) -> str:
        try:
            models = call(url, "/v1/models", timeout=30)
        except ServerDown as exc:
            raise PluginError(f"no vLLM server answers at {exc} (backend.params.urls)") from None
        return str(models["data"][0]["id"])

    def _check_weight_api(self, url: str) -> None:
        try:
            call(url, "/weight_info", timeout=30)
            call(url, "/init_weight_transfer_engine", {"init_info": {}}, timeout=60)
        except PluginError as exc:
            raise PluginError(
                f"the vLLM server at {url} does not take weights from rlvr ({exc}); start it "
                f"with VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config '{ENGINE}', with "
                "rlvr installed in its environment"
            ) from None

    def _join_nccl(self, model: Any, run: RunInfo) -> Any:
        # vLLM's NCCL engine, only when asked for (rlvr.plugins.backends.vllm_nccl)
        from rlvr.plugins.backends.vllm_nccl import NCCLTransfer

        dtype = getattr(torch, run.dtype)
        return NCCLTransfer(self.urls, model, dtype, timeout=self.params.request_timeout)

    # ------------------------------------------------------------------ Generator protocol

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        check_sampling_request(prompts, n, sampling)
        if not prompts:
            return Generation(token_ids=[], texts=[], truncated=[], logprobs=[])
        self._resync_stale()
        common = dict(request_settings(sampling, self.eos_ids), return_token_ids=True)
        jobs = []
        for i, prompt in enumerate(prompts):
            for j in range(n):
                k = i * n + j
                body = dict(common, prompt=[int(t) for t in prompt])
                if sampling.seed is not None:
                    body["seed"] = completion_seed(sampling.seed, k)
                jobs.append(self._pool.submit(self._complete, i, body))
        token_ids: list[list[int]] = []
        truncated: list[bool] = []
        logprobs: list[list[float]] = []
        for job in jobs:
            choice = job.result()
            token_ids.append([int(t) for t in choice["token_ids"]])
            truncated.append(choice["finish_reason"] == "length")
            logprobs.append([float(x) for x in choice["logprobs"]["token_logprobs"]])
        texts = self.tokenizer.batch_decode(
            token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return Generation(token_ids=token_ids, texts=texts, truncated=truncated, logprobs=logprobs)

    def take_metrics(self) -> dict[str, float]:
        """The servers' own counters (their ``/metrics``) since the last call, summed over the
        servers (with several ranks sharing them, every rank's requests count):
        ``server/queue_time``, the mean seconds a request waited in a server's queue, and
        ``prefix_cache/hit_frac``, the share of prompt tokens the prefix cache served."""
        delta = dict.fromkeys(_COUNTERS, 0.0)
        for url in list(self.alive):
            try:
                text = call(url, "/metrics", timeout=30)
            except (ServerDown, PluginError):
                continue
            now = _counters(str(text))
            before = self._counters_seen.get(url, dict.fromkeys(_COUNTERS, 0.0))
            self._counters_seen[url] = now
            for name in _COUNTERS:
                delta[name] += now[name] - before[name]
        out = {}
        if delta["vllm:request_queue_time_seconds_count"] > 0:
            queued = delta["vllm:request_queue_time_seconds_sum"]
            out["server/queue_time"] = queued / delta["vllm:request_queue_time_seconds_count"]
        if delta["vllm:prefix_cache_queries_total"] > 0:
            hits = delta["vllm:prefix_cache_hits_total"]
            out["prefix_cache/hit_frac"] = hits / delta["vllm:prefix_cache_queries_total"]
        return out

    def _complete(self, prompt: int, body: dict[str, Any]) -> dict[str, Any]:
        """One completion, on the server of its prompt's group, or another if that one is
        down; with none up, wait for one up to ``request_timeout``."""
        deadline = time.monotonic() + self.params.request_timeout
        while True:
            if self._closed.is_set():
                raise PluginError("the vLLM servers were closed while a request waited")
            alive = list(self.alive)
            if not alive:
                alive = self._wait_for_a_server(deadline)
            url = alive[prompt % len(alive)]
            try:
                answer = call(
                    url,
                    "/v1/completions",
                    dict(body, model=self.model_names[url] if self.lora is None else ADAPTER_NAME),
                    timeout=self.params.request_timeout,
                )
                return dict(answer["choices"][0])
            except ServerDown as exc:
                self._lost(url, exc)

    def _lost(self, url: str, why: object) -> None:
        with self._alive_lock:  # requests of several threads may find it down at once
            if url not in self.alive:
                return
            self.alive.remove(url)
        logger.warning(
            "vLLM server %s stopped answering (%s); its requests go to the %d other(s)",
            url,
            why,
            len(self.alive),
        )

    def _wait_for_a_server(self, deadline: float) -> list[str]:
        logger.warning(
            "no vLLM server answers; waiting up to %g s (backend.params.request_timeout) for "
            "one to come back",
            self.params.request_timeout,
        )
        while time.monotonic() < deadline and not self._closed.is_set():
            for url in self.urls:
                with contextlib.suppress(ServerDown, PluginError):
                    call(url, "/health", timeout=5)
                    with self._alive_lock:  # each waiting request may find it back
                        if url not in self.alive:
                            self.alive.append(url)
                    self._resync_stale()  # back, perhaps restarted: the weights first
                    return list(self.alive) or [url]
            self._closed.wait(2.0)
        if self._closed.is_set():
            raise PluginError("the vLLM servers were closed while a request waited")
        raise PluginError(
            f"no vLLM server answered for {self.params.request_timeout:g} s "
            f"({', '.join(self.urls)}); the step trains on nothing. Restart the servers and "
            "resume the run (rlvr train CONFIG --resume)"
        )

    def _resync_stale(self) -> None:
        """Servers holding another weight version than the current one get it again (from
        rank 0; another rank waits until they hold it)."""
        if self.rank != 0:
            self._wait_for_version()
            return
        want = str(self.version)
        stale = [url for url in list(self.alive) if self._held(url) not in (want, _LOST)]
        if stale and self._nccl is not None:
            raise self._nccl.cannot_rejoin(stale)
        if stale and self._model is not None:
            logger.warning(
                "vLLM server(s) %s hold weights other than version %s: sending them again",
                ", ".join(stale),
                want,
            )
            self._push(self._model, stale, base=True)

    def _wait_for_version(self) -> None:
        """Wait (up to ``request_timeout``) until every live server holds this rank's version,
        which rank 0 sends."""
        want = str(self.version)
        deadline = time.monotonic() + self.params.request_timeout
        for url in list(self.alive):
            while True:
                held = self._held(url)
                if held in (want, _LOST) or self._closed.is_set():
                    break
                if time.monotonic() > deadline:
                    raise PluginError(
                        f"the vLLM server {url} holds weight version {held}, not {want}, after "
                        f"{self.params.request_timeout:g} s: rank 0 sends the weights; see "
                        "its log for why it did not"
                    )
                time.sleep(0.05)

    def _held(self, url: str) -> str | None:
        """The weight version a server holds (``_LOST`` if it does not answer: it is lost)."""
        try:
            return call(url, "/weight_info", timeout=30).get("weight_version")
        except ServerDown as exc:
            self._lost(url, exc)
            return _LOST

    def sync_weights(self, model: Any) -> None:
        """Send ``model``'s weights (or only its LoRA adapter) to every server as the next
        version (rank 0; another rank only counts the version)."""
        self._model = model
        self.version += 1
        if self.rank != 0:
            return
        urls = list(self.alive)
        if not self.takes_weights_in_flight:
            self._push(model, urls, base=self.lora is None)
            return
        paused = [u for u in urls if self._try(u, "/pause?mode=keep")]
        try:
            self._push(model, paused, base=self.lora is None)
        finally:
            for url in paused:
                self._try(url, "/resume")

    def _try(self, url: str, path: str) -> bool:
        """POST ``path`` to one server; False (and the server is lost) if it is down."""
        try:
            call(url, path, {}, timeout=60)
        except ServerDown as exc:
            self._lost(url, exc)
            return False
        return True

    def _push(self, model: Any, urls: list[str], base: bool) -> None:
        """The weights to ``urls``: the whole model when ``base`` (merged, or the base alone
        when the servers apply the adapter), then the adapter, if there is one."""
        with self._push_lock:  # a resync from generate() and an update may meet
            self._push_locked(model, urls, base)

    def _push_locked(self, model: Any, urls: list[str], base: bool) -> None:
        version = str(self.version)
        if self._nccl is not None:
            self._nccl.send(model, version, urls)
            return
        path = Path(shared_memory() or tempfile.gettempdir())
        path = path / f"rlvr-weights-{os.getpid()}-{id(self)}.safetensors"
        try:
            if base:
                with torch.no_grad():
                    tensors = {
                        name: t.detach().clone().contiguous()
                        for name, t in hf_weights(model, merge_lora=self.lora is None)
                    }
                save_file(tensors, str(path))
                del tensors
            if self.lora is not None:
                if self._adapter_dir is None:
                    self._adapter_dir = AdapterDir(shared_memory())
                self._adapter_dir.write(model)
            loaded = list(self._push_pool.map(lambda u: self._load(u, path, base, version), urls))
            for url, done in zip(urls, loaded, strict=True):
                if not done:
                    self._lost(url, "while taking weights")
        finally:
            path.unlink(missing_ok=True)

    def _load(self, url: str, path: Path, base: bool, version: str) -> bool:
        """The written weights into one server as ``version``; False if it is down."""
        try:
            if base:
                call(url, "/start_weight_update", {}, timeout=600)
                call(url, "/update_weights", {"update_info": {"path": str(path)}}, timeout=600)
                call(url, "/finish_weight_update", {"weight_version": version}, timeout=600)
            if self._adapter_dir is not None:
                self._load_adapter(url, str(self._adapter_dir.path))
                call(url, "/update_weight_version", {"new_version": version}, timeout=60)
            call(url, "/reset_prefix_cache", {}, timeout=60)
        except ServerDown:
            return False
        return True

    def _load_adapter(self, url: str, directory: str) -> None:
        body = {"lora_name": ADAPTER_NAME, "lora_path": directory, "load_inplace": True}
        try:
            call(url, "/v1/load_lora_adapter", body, timeout=600)
        except PluginError as exc:
            raise PluginError(
                f"the vLLM server at {url} does not take LoRA adapters ({exc}); start it with "
                "--enable-lora --max-lora-rank R (R at least the adapter's rank) and "
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1, or set backend.params.lora_sync: merged"
            ) from None

    def close(self) -> None:
        """Stop the servers rlvr started (servers given by URL keep running); waiting
        requests are told to give up first."""
        atexit.unregister(self.close)
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._push_pool.shutdown(wait=False, cancel_futures=True)
        try:
            if self._nccl is not None:  # the servers leave the group before they stop
                nccl, self._nccl = self._nccl, None
                nccl.close()
        finally:
            self._stop_started()

    def _stop_started(self) -> None:
        """Signal every server rlvr started before waiting for any, so that a Ctrl-C during a
        wait leaves none running; remove the files they were handed."""
        for server in self.started:
            server.terminate()
        try:
            for server in self.started:
                server.stop()
        finally:
            self.started = []
            if self._adapter_dir is not None:
                self._adapter_dir.close()
                self._adapter_dir = None
            if self._files is not None and self._files.tmp is not None:
                self._files.tmp.cleanup()
                self._files = None


#: the counters of a server's ``/metrics`` that :meth:`ServerGenerator.take_metrics` reads
_COUNTERS = (
    "vllm:request_queue_time_seconds_sum",
    "vllm:request_queue_time_seconds_count",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)


def _counters(prometheus: str) -> dict[str, float]:
    """The values of :data:`_COUNTERS` in a ``/metrics`` text, each summed over its label sets."""
    sums = dict.fromkeys(_COUNTERS, 0.0)
    for line in prometheus.splitlines():
        name = line.partition("{")[0].partition(" ")[0]  # with labels or without
        if name in sums:
            sums[name] += float(line.rpartition(" ")[2])
    return sums


def vllm_generator(params: VLLMParams, run: RunInfo, model: Any, tokenizer: Any) -> Any:
    """The ``vllm`` backend's factory: ``params.mode`` picks the colocated engine or servers."""
    if params.mode == "server":
        return ServerGenerator(params, run, model, tokenizer)
    return VLLMGenerator(params, run, model, tokenizer)


__all__ = ["ServerGenerator", "call", "server_argv", "vllm_generator"]
