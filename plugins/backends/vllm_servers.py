"""The ``vllm`` backend's server mode (``backend.params.mode: server``): `vllm serve` processes
that rlvr starts or connects to, sampled over HTTP and fed each update's weights through vLLM's
weight-transfer API (``rlvr_shm``: :mod:`rlvr.plugins.backends.vllm_engine`; servers on other
machines: vLLM's ``nccl``, :mod:`rlvr.plugins.backends.vllm_nccl`).

One request per completion, seeded as the colocated engine seeds it (:func:`completion_seed`),
so a server and a colocated engine with the same weights sample the same tokens; all the
completions of a prompt go to one server, whose prefix cache then holds the prompt once. Each
server holds a weight version (the number of updates pushed); before sampling, a server that
holds another version (restarted, or fed by someone else) gets the current weights again. A
server that stops answering loses its requests to the others; with none left, the call waits
up to ``request_timeout`` for one to come back, then fails the step. The servers rlvr started
die with it: their own process group, stopped on ``close``, at exit, and by the kernel when the
trainer dies (``PR_SET_PDEATHSIG``).
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
from safetensors.torch import save_file

from rlvr._builtin import check_sampling_request, hf_weights, is_peft, unwrap_model
from rlvr.plugin import Generation, PluginError, RunInfo, SamplingParams, eos_token_ids
from rlvr.plugins.backends.params import VLLMParams
from rlvr.plugins.backends.vllm import (
    VLLMGenerator,
    completion_seed,
    engine_files,
    request_settings,
)
from rlvr.plugins.backends.vllm_api import ENGINE, NCCL_ENGINE, ServerDown, call

logger = logging.getLogger(__name__)

SERVED_NAME = "rlvr-policy"
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

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def server_argv(params: VLLMParams, run: RunInfo, files: Any, cpus: str | None) -> list[str]:
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
        if params.weight_transfer == "nccl" and not run.device.startswith("cuda"):
            raise PluginError(
                f"backend.params.weight_transfer: nccl needs the trainer on CUDA (this run is on "
                f"{run.device}); use weight_transfer: shm for servers on the trainer's machine"
            )
        self._nccl: Any = None
        self.started: list[StartedServer] = []
        self._files: Any = None
        self.version = 0
        self._model: Any = None
        self._alive_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rlvr-vllm")
        atexit.register(self.close)
        try:
            self.urls = list(params.urls) or self._start(params, run, model, tokenizer)
            self.alive = list(self.urls)
            self.model_names = {url: self._served_name(url) for url in self.urls}
            if params.weight_transfer == "nccl":
                self._nccl = self._join_nccl(model, run)
            else:
                for url in self.urls:
                    self._check_weight_api(url)
            self.sync_weights(model)
        except BaseException:
            self.close()
            raise

    def _start(self, params: VLLMParams, run: RunInfo, model: Any, tokenizer: Any) -> list[str]:
        self._files = engine_files(model, tokenizer)
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(params.kv_cache_space_gb))))
        logs = Path(run.output_dir or tempfile.gettempdir()) / "vllm-servers"
        for i in range(params.servers):
            cpus = params.server_cpus[i] if params.server_cpus else None
            argv = server_argv(params, run, self._files, cpus)
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
        timeout = self.params.request_timeout
        return NCCLTransfer(self.urls, model, dtype, shared=not self.started, timeout=timeout)

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

    def _complete(self, prompt: int, body: dict[str, Any]) -> dict[str, Any]:
        """One completion, on the server of its prompt's group, or another if that one is
        down; with none up, wait for one up to ``request_timeout``."""
        deadline = time.monotonic() + self.params.request_timeout
        while True:
            alive = list(self.alive)
            if not alive:
                alive = self._wait_for_a_server(deadline)
            url = alive[prompt % len(alive)]
            try:
                answer = call(
                    url,
                    "/v1/completions",
                    dict(body, model=self.model_names[url]),
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
        while time.monotonic() < deadline:
            for url in self.urls:
                with contextlib.suppress(ServerDown, PluginError):
                    call(url, "/health", timeout=5)
                    with self._alive_lock:  # each waiting request may find it back
                        if url not in self.alive:
                            self.alive.append(url)
                    self._resync_stale()  # back, perhaps restarted: the weights first
                    return list(self.alive) or [url]
            time.sleep(2.0)
        raise PluginError(
            f"no vLLM server answered for {self.params.request_timeout:g} s "
            f"({', '.join(self.urls)}); the step trains on nothing. Restart the servers and "
            "resume the run (rlvr train CONFIG --resume)"
        )

    def _resync_stale(self) -> None:
        """Servers holding another weight version than the current one get it again."""
        want = str(self.version)
        stale = []
        for url in list(self.alive):
            try:
                held = call(url, "/weight_info", timeout=30).get("weight_version")
            except ServerDown as exc:
                self._lost(url, exc)
                continue
            if held != want:
                stale.append(url)
        if stale and self._nccl is not None:
            raise self._nccl.cannot_rejoin(stale)
        if stale and self._model is not None:
            logger.warning(
                "vLLM server(s) %s hold weights other than version %s: sending them again",
                ", ".join(stale),
                want,
            )
            self._push(self._model, stale)

    def sync_weights(self, model: Any) -> None:
        """Send ``model``'s weights to every server as the next version."""
        self._model = model
        self.version += 1
        if self._nccl is not None:
            self._nccl.send(model, str(self.version), list(self.alive))
        else:
            self._push(model, list(self.alive))

    def _push(self, model: Any, urls: list[str]) -> None:
        with torch.no_grad():
            tensors = {name: t.detach().clone().contiguous() for name, t in hf_weights(model)}
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
        path = shm / f"rlvr-weights-{os.getpid()}-{id(self)}.safetensors"
        try:
            save_file(tensors, str(path))
            del tensors
            version = str(self.version)
            loaded = list(self._pool.map(lambda u: self._load(u, path, version), urls))
            for url, done in zip(urls, loaded, strict=True):
                if not done:
                    self._lost(url, "while taking weights")
        finally:
            path.unlink(missing_ok=True)

    def _load(self, url: str, path: Path, version: str) -> bool:
        """The file's weights into one server as ``version``; False if it is down."""
        try:
            call(url, "/start_weight_update", {}, timeout=600)
            call(url, "/update_weights", {"update_info": {"path": str(path)}}, timeout=600)
            call(url, "/finish_weight_update", {"weight_version": version}, timeout=600)
            call(url, "/reset_prefix_cache", {}, timeout=60)
        except ServerDown:
            return False
        return True

    def close(self) -> None:
        """Stop the servers rlvr started (servers given by URL keep running)."""
        atexit.unregister(self.close)
        if self._nccl is not None:
            self._nccl.close()
            self._nccl = None
        for server in self.started:
            server.stop()
        self.started = []
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._files is not None and self._files.tmp is not None:
            self._files.tmp.cleanup()
            self._files = None


def vllm_generator(params: VLLMParams, run: RunInfo, model: Any, tokenizer: Any) -> Any:
    """The ``vllm`` backend's factory: ``params.mode`` picks the colocated engine or servers."""
    if params.mode == "server":
        return ServerGenerator(params, run, model, tokenizer)
    return VLLMGenerator(params, run, model, tokenizer)


__all__ = ["ServerGenerator", "call", "server_argv", "vllm_generator"]
