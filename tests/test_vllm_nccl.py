"""Server mode's NCCL weight transfer (:mod:`rlvr.plugins.backends.vllm_nccl`), on a CPU.

NCCL needs CUDA, so no weight crosses NCCL here. The servers are small HTTP servers in this
process that answer vLLM's routes and record every request; the two calls that touch NCCL are
stubbed, and recorded: vLLM's trainer endpoint (``open_trainer_endpoint``: the TCP rendezvous
and the ``PyNcclCommunicator``) and its packed broadcast (``packed_nccl_broadcast_producer``:
CUDA streams and ``PyNcclCommunicator.broadcast``). Everything between (vLLM's trainer engine
and its checks, rlvr's generator, client and weight source) runs as on a GPU. What the servers
are sent is parsed with vLLM's own server-side engine.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rlvr.plugins.backends import INSTALL_HINT

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
        pytest.fail(f"RLVR_REQUIRE_VLLM=1 but vLLM is not importable: {INSTALL_HINT}")
    pytest.skip(f"vLLM is not installed ({INSTALL_HINT})", allow_module_level=True)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from vllm.distributed.weight_transfer import nccl_engine  # noqa: E402
from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine  # noqa: E402

from rlvr.api.runtime import RunInfo, SamplingParams  # noqa: E402
from rlvr.cli.main import main  # noqa: E402
from rlvr.model.weights import hf_weights  # noqa: E402
from rlvr.plugin import PluginError  # noqa: E402
from rlvr.plugins.backends import vllm_nccl, vllm_servers  # noqa: E402
from rlvr.plugins.backends.params import VLLMParams  # noqa: E402
from rlvr.plugins.backends.vllm import engine_files  # noqa: E402
from rlvr.plugins.backends.vllm_servers import ServerGenerator, server_argv  # noqa: E402

pytestmark = pytest.mark.vllm
#: a GPU run's facts: the generator refuses nccl on any other device
GPU_RUN = RunInfo(max_completion_length=4, num_generations=2, device="cuda", dtype="bfloat16")


# --------------------------------------------------------------------------- fake servers


@dataclass
class FakeServer:
    """A vLLM server's routes, as far as rlvr uses them, recording each request."""

    world_size: int = 1
    backend: str | None = "nccl"  # its --weight-transfer-config; None: no VLLM_SERVER_DEV_MODE
    refuse_init: bool = False
    version: str | None = None
    requests: list[tuple[str, Any]] = field(default_factory=list)
    url: str = ""
    httpd: Any = None

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        self.requests.append((path, body))
        if path == "/v1/models":
            return 200, {"data": [{"id": "policy"}]}
        if path == "/server_info?config_format=json":
            if self.backend is None:
                return 404, {"detail": "Not Found"}
            return 200, {"vllm_config": {"weight_transfer_config": {"backend": self.backend}}}
        if path == "/get_world_size":
            return 200, {"world_size": self.world_size}
        if path == "/weight_info":
            return 200, {"weight_version": self.version}
        if path == "/init_weight_transfer_engine" and self.refuse_init:
            return 500, {"error": "Weight transfer not configured"}
        if path == "/finish_weight_update":
            self.version = body["weight_version"]
        if path == "/v1/completions":
            choice = {"token_ids": [5, 6], "finish_reason": "length"}
            return 200, {"choices": [dict(choice, logprobs={"token_logprobs": [-1.0, -2.0]})]}
        return 200, {}

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def body(self, path: str) -> Any:
        return next(body for p, body in self.requests if p == path)


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(FakeServer(...))`` runs it on a free local port (a real ``http.server``)."""
    running = []

    def start(fake: FakeServer) -> FakeServer:
        class Handler(BaseHTTPRequestHandler):
            def _reply(self, method: str) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size)) if size else None
                status, answer = fake.answer(method, self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply("GET")

            def do_POST(self) -> None:
                self._reply("POST")

            def log_message(self, *args: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        running.append(httpd)
        fake.httpd = httpd
        fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        return fake

    yield start
    for httpd in running:
        if httpd.socket.fileno() != -1:
            httpd.shutdown()
            httpd.server_close()


def stop(fake: FakeServer) -> None:
    """The server goes away: connections to it are refused."""
    fake.httpd.shutdown()
    fake.httpd.server_close()


@dataclass
class FakeNCCL:
    """What reached the NCCL boundary: the trainer's rendezvous and each broadcast."""

    endpoints: list[Any] = field(default_factory=list)
    broadcasts: list[list[tuple[str, torch.Tensor]]] = field(default_factory=list)
    destroyed: int = 0


@pytest.fixture
def nccl(monkeypatch) -> FakeNCCL:
    seen = FakeNCCL()

    class Communicator:
        def destroy(self) -> None:
            seen.destroyed += 1

    def open_trainer_endpoint(init_info: Any) -> Communicator:
        seen.endpoints.append(init_info)
        return Communicator()

    def broadcast(iterator, group, src, post_iter_func, buffer_size_bytes, num_buffers):
        assert isinstance(group, Communicator) and src == 0
        seen.broadcasts.append([(name, post_iter_func((name, t))) for name, t in iterator])

    monkeypatch.setattr(nccl_engine, "open_trainer_endpoint", open_trainer_endpoint)
    monkeypatch.setattr(nccl_engine, "packed_nccl_broadcast_producer", broadcast)
    return seen


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from rlvr.model.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def nccl_params(*servers: FakeServer, **more: Any) -> VLLMParams:
    urls = [s.url for s in servers]
    return VLLMParams(mode="server", urls=urls, weight_transfer="nccl", **more)


def vllm_engine() -> NCCLWeightTransferEngine:
    """vLLM's server-side engine, for its parse_init_info / parse_update_info only."""
    return NCCLWeightTransferEngine.__new__(NCCLWeightTransferEngine)


# --------------------------------------------------------------------------- the transfer


def test_each_update_is_one_broadcast_the_servers_are_told_of(serve, nccl, policy):
    """Two servers of 1 and 2 workers: one group of 4 (the trainer rank 0, then each server's
    workers), the weights broadcast once per update, every server told what comes and then
    the version."""
    model, tokenizer = policy
    a, b = serve(FakeServer(world_size=1)), serve(FakeServer(world_size=2))
    gen = ServerGenerator(nccl_params(a, b), GPU_RUN, model, tokenizer)
    try:
        gen.sync_weights(model)
    finally:
        gen.close()

    (endpoint,) = nccl.endpoints
    assert (endpoint.world_size, endpoint.rank, endpoint.packed) == (4, 0, True)
    update = ["/start_weight_update", "/update_weights", "/finish_weight_update"]
    update.append("/reset_prefix_cache")
    for server, offset in ((a, 1), (b, 2)):
        assert server.paths() == [
            "/v1/models",
            "/server_info?config_format=json",
            "/get_world_size",
            "/init_weight_transfer_engine",
            *update,  # the first weights, when the generator starts
            *update,  # sync_weights
            "/shutdown_weight_transfer_engine",  # close: a resumed run forms a new group
        ]
        init = vllm_engine().parse_init_info(
            server.body("/init_weight_transfer_engine")["init_info"]
        )
        assert (init.rank_offset, init.world_size) == (offset, 4)
        assert (init.master_address, init.master_port) == (
            endpoint.master_address,
            endpoint.master_port,
        )
        assert init.packed  # as the trainer packs (vLLM ships it at init)
        versions = [body for path, body in server.requests if path == "/finish_weight_update"]
        assert versions == [{"weight_version": "1"}, {"weight_version": "2"}]
    assert nccl.destroyed == 1

    # What each server is told it will receive is what the broadcast carries: the policy's
    # weights by their Hugging Face names, in the servers' dtype.
    info = vllm_engine().parse_update_info(a.body("/update_weights")["update_info"])
    assert len(nccl.broadcasts) == 2
    sent = nccl.broadcasts[-1]
    expected = [(name, t.to(torch.bfloat16)) for name, t in hf_weights(model)]
    assert info.names == [name for name, _ in expected] == [name for name, _ in sent]
    assert info.dtype_names == ["bfloat16"] * len(expected)
    assert info.shapes == [list(t.shape) for _, t in expected]
    for (_, got), (_, want) in zip(sent, expected, strict=True):
        assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_samples_come_from_servers_holding_the_version_sent(serve, nccl, policy):
    model, tokenizer = policy
    a = serve(FakeServer())
    gen = ServerGenerator(nccl_params(a), GPU_RUN, model, tokenizer)
    try:
        out = gen.generate([[1, 2, 3]], 2, SamplingParams(max_tokens=2, seed=1))
        assert out.token_ids == [[5, 6], [5, 6]]
        assert a.paths().count("/update_weights") == 1  # no second sending
        a.version = None  # the server restarted: out of the group, with its own weights
        with pytest.raises(PluginError, match="restart all the servers and resume"):
            gen.generate([[1, 2, 3]], 2, SamplingParams(max_tokens=2, seed=1))
    finally:
        gen.close()


def test_a_server_that_stopped_answering_ends_the_run_at_the_next_update(serve, nccl, policy):
    model, tokenizer = policy
    a, b = serve(FakeServer()), serve(FakeServer())
    gen = ServerGenerator(nccl_params(a, b), GPU_RUN, model, tokenizer)
    try:
        stop(b)
        out = gen.generate([[1], [2]], 1, SamplingParams(max_tokens=2, seed=1))
        assert len(out.token_ids) == 2  # b's prompt went to a
        with pytest.raises(PluginError, match=f"{b.url} stopped answering.*--resume"):
            gen.sync_weights(model)
        assert len(nccl.broadcasts) == 1  # nothing sent into a group with a member gone
    finally:
        gen.close()


def test_a_lora_policy_goes_merged_over_nccl(serve, nccl, policy):
    """An adapter alone would go as a file: over NCCL, lora_sync: auto merges it (what a GPU
    would otherwise send alone) and the broadcast carries the merged weights."""
    pytest.importorskip("peft", reason="LoRA needs peft (rlvr[lora])")
    from rlvr.config.schema import LoraConfig
    from rlvr.model import lora

    model, tokenizer = policy
    peft_model = lora.add_adapters(copy.deepcopy(model), LoraConfig(r=4))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)  # an adapter that changes the weights
    a = serve(FakeServer())
    gen = ServerGenerator(nccl_params(a), GPU_RUN, peft_model, tokenizer)
    gen.close()
    assert gen.lora is None and "/v1/load_lora_adapter" not in a.paths()
    (sent,) = nccl.broadcasts
    merged = [(name, t.to(torch.bfloat16)) for name, t in hf_weights(peft_model)]
    assert [name for name, _ in sent] == [name for name, _ in merged]
    assert not any("lora_" in name for name, _ in sent)
    assert all(torch.equal(got, want) for (_, got), (_, want) in zip(sent, merged, strict=True))
    with pytest.raises(ValueError, match="lora_sync: adapter .* set lora_sync: merged"):
        VLLMParams(mode="server", weight_transfer="nccl", lora_sync="adapter")


def test_rank_offsets_follow_each_servers_workers():
    assert vllm_nccl.rank_offsets([1]) == [1]
    assert vllm_nccl.rank_offsets([2, 1, 4]) == [1, 3, 4]


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("fake", "why"),
    [
        (FakeServer(backend="rlvr_shm"), "its weight-transfer backend is 'rlvr_shm'"),
        (FakeServer(backend=None), "not started with VLLM_SERVER_DEV_MODE=1"),
        (FakeServer(refuse_init=True), "HTTP 500"),
    ],
)
def test_a_server_not_started_for_nccl_is_one_error_naming_the_flag(serve, nccl, policy, fake, why):
    server = serve(fake)
    with pytest.raises(PluginError) as caught:
        ServerGenerator(nccl_params(server), GPU_RUN, *policy)
    message = str(caught.value)
    assert why in message and "\n" not in message and server.url in message
    assert 'VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config \'{"backend": "nccl"}\'' in message
    assert "/update_weights" not in server.paths()


def test_nccl_on_a_cpu_trainer_is_one_error_before_a_server_starts(
    tmp_path, train_sections, capsys, monkeypatch
):
    def no_server(*args: Any) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr(vllm_servers, "StartedServer", no_server)
    config = tmp_path / "run.yaml"
    config.write_text(
        train_sections + "rewards: [{name: numbers}]\n"
        "backend: {name: vllm, params: {mode: server, weight_transfer: nccl}}\n"
        f"training: {{output_dir: {tmp_path / 'out'}, reward_workers: 0, max_steps: 1}}\n"
    )
    assert main(["train", str(config)]) != 0
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: backend.params.weight_transfer: nccl needs the trainer on CUDA (this run is on "
        "cpu); use weight_transfer: shm for servers on the trainer's machine"
    ]


def test_nccl_without_server_mode_is_one_config_problem(tmp_path, train_sections, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(
        train_sections + "rewards: [{name: numbers}]\n"
        "backend: {name: vllm, params: {weight_transfer: nccl}}\n"
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert "1 problem in the config:" in err
    assert (
        "backend.params: weight_transfer: nccl moves weights to vLLM servers; set mode: server"
        in err
    )
    assert VLLMParams(mode="server", weight_transfer="nccl").weight_transfer == "nccl"


def test_servers_rlvr_starts_for_nccl_get_vllms_nccl_engine(policy):
    model, tokenizer = policy
    files = engine_files(model, tokenizer)
    try:
        nccl = server_argv(VLLMParams(mode="server", weight_transfer="nccl"), GPU_RUN, files, None)
        shm = server_argv(VLLMParams(mode="server"), GPU_RUN, files, None)
    finally:
        if files.tmp is not None:
            files.tmp.cleanup()
    flag = nccl.index("--weight-transfer-config")
    assert json.loads(nccl[flag + 1]) == {"backend": "nccl"}
    assert json.loads(shm[flag + 1]) == {"backend": "rlvr_shm"}  # the default, as before
