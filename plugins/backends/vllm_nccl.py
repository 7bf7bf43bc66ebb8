"""Server mode's weights over NCCL (``backend.params.weight_transfer: nccl``), for vLLM servers
on other machines.

``rlvr_shm`` hands a server a file, so it must share the trainer's filesystem. Across machines
vLLM's own ``nccl`` engine carries the weights: the trainer and every worker of every server
join one NCCL group (the trainer rank 0, each server's workers after those of the servers before
it), and each update is a broadcast from the trainer, driven by vLLM's trainer-side engine
(``NCCLTrainerWeightTransferEngine``, packed buffers) while each server receives inside its
``/update_weights``. What rlvr adds is here: the policy's weights as vLLM's ``WeightSource``
(Hugging Face names, LoRA merged, cast to the servers' dtype) and one client for all the servers,
each at its own rank offset. The group cannot take a server back once it left: a server that
restarts or stops answering ends the run at the next update (restart them all, ``--resume``).

NCCL needs CUDA on both sides. None of this has run on a GPU: the machines this project borrows
cannot install vLLM for CUDA. The tests drive it over HTTP with the two NCCL calls stubbed
(``tests/test_vllm_nccl.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
)
from vllm.utils.network_utils import get_ip, get_open_port

from rlvr._builtin import hf_weights
from rlvr.plugin import PluginError
from rlvr.plugins.backends.vllm_api import NCCL_ENGINE, ServerDown, call


def refused(url: str, why: str) -> PluginError:
    """The one error of a server that cannot join the trainer's NCCL group."""
    return PluginError(
        f"the vLLM server at {url} cannot take weights over NCCL ({why}); start it with "
        f"VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config '{NCCL_ENGINE}' on a GPU, or use "
        "backend.params.weight_transfer: shm for servers on the trainer's machine"
    )


def lost(why: object) -> PluginError:
    """The one error of a group that lost a server: NCCL cannot go on without it."""
    return PluginError(
        f"a vLLM server left the NCCL weight-transfer group ({why}); the group cannot take a "
        "server back: restart all the servers and resume the run (rlvr train CONFIG --resume)"
    )


def rank_offsets(world_sizes: list[int]) -> list[int]:
    """The NCCL rank of each server's first worker: the trainer is rank 0, then each server's
    workers (its ``/get_world_size``: tensor x pipeline x data parallel) in turn."""
    offsets, rank = [], 1
    for size in world_sizes:
        offsets.append(rank)
        rank += size
    return offsets


def check_engine(url: str) -> None:
    """Refuse, at once, a server not started with vLLM's ``nccl`` engine: the trainer's side of
    the rendezvous would otherwise wait minutes for a worker that never comes."""
    try:
        info = call(url, "/server_info?config_format=json", timeout=120)
    except PluginError:  # no /server_info: not in VLLM_SERVER_DEV_MODE
        raise refused(url, "no /server_info: not started with VLLM_SERVER_DEV_MODE=1") from None
    transfer = (info.get("vllm_config") or {}).get("weight_transfer_config") or {}
    if transfer.get("backend") != "nccl":
        raise refused(url, f"its weight-transfer backend is {transfer.get('backend')!r}")


class PolicyWeights(WeightSource):
    """The policy's weights as vLLM's trainer engine reads them: :func:`hf_weights`, floating
    tensors cast to the servers' dtype (what the servers would round them to anyway; bfloat16
    halves float32's bytes on the wire). ``model`` is replaced before each update."""

    def __init__(self, model: Any, dtype: torch.dtype) -> None:
        self.model = model
        self.dtype = dtype
        self._meta: list[ParamMeta] | None = None

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in hf_weights(self.model):
            yield name, tensor.to(self.dtype) if tensor.is_floating_point() else tensor

    def metadata(self) -> list[ParamMeta]:
        """Read once, from one pass over the weights: names, dtypes and shapes do not change
        during a run."""
        if self._meta is None:
            self._meta = [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in self]
        return self._meta


class Servers:
    """vLLM's trainer-side client protocol (``VLLMWeightSyncClient``) over several servers:
    each call goes to all of them at once and returns when all have answered. vLLM's trainer
    engine addresses one server, whose workers start at rank 1; here each server gets its own
    ``rank_offset``. ``version`` is the weight version ``finish_weight_update`` stamps."""

    def __init__(self, urls: list[str], offsets: list[int], timeout: float) -> None:
        self.urls = urls
        self.offsets = offsets
        self.timeout = timeout
        self.version: str | None = None

    def _each(self, fn: Callable[[str, int], Any]) -> None:
        """``fn(url, rank_offset)`` for every server at once; the first error, once all end."""
        with ThreadPoolExecutor(max_workers=len(self.urls)) as pool:
            jobs = [pool.submit(fn, u, o) for u, o in zip(self.urls, self.offsets, strict=True)]
            for job in jobs:
                job.result()

    def _post(self, path: str, body: dict[str, Any]) -> None:
        self._each(lambda url, _: call(url, path, body, self.timeout))

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        def join(url: str, offset: int) -> None:
            body = {"init_info": dict(init_info, rank_offset=offset)}
            try:
                call(url, "/init_weight_transfer_engine", body, self.timeout)
            except PluginError as exc:
                raise refused(url, str(exc)) from None

        self._each(join)

    def start_weight_update(self) -> None:
        self._post("/start_weight_update", {})

    def update_weights(self, update_info: Any) -> None:
        self._post("/update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        version = weight_version if weight_version is not None else self.version
        self._post("/finish_weight_update", {"weight_version": version})


class NCCLTransfer:
    """The NCCL group of the trainer and the servers' workers, and each update's broadcast.

    Held by the trainer's rank 0 alone, the one that feeds the servers (the other ranks wait for
    the version it sends, :class:`~rlvr.plugins.backends.vllm_servers.ServerGenerator`).
    """

    def __init__(self, urls: list[str], model: Any, dtype: torch.dtype, *, timeout: float) -> None:
        self.urls = list(urls)
        try:
            sizes = []
            for url in self.urls:
                check_engine(url)
                sizes.append(int(call(url, "/get_world_size", timeout=30)["world_size"]))
            self.servers = Servers(self.urls, rank_offsets(sizes), timeout)
            self.source = PolicyWeights(model, dtype)
            info = NCCLTrainerInitInfo(
                master_address=get_ip(),  # where servers reach the trainer: VLLM_HOST_IP if set
                master_port=get_open_port(),
                world_size=1 + sum(sizes),
                rank=0,
            )
            self.engine = NCCLTrainerWeightTransferEngine.trainer_init(
                info, client=self.servers, source=self.source
            )
        except ServerDown as exc:
            raise PluginError(f"no vLLM server answers at {exc} (backend.params.urls)") from None

    def send(self, model: Any, version: str, alive: list[str]) -> None:
        """``model``'s weights to every server as ``version``."""
        if set(alive) != set(self.urls):
            raise lost(f"{', '.join(sorted(set(self.urls) - set(alive)))} stopped answering")
        self.source.model = model
        self.servers.version = version
        try:
            self.engine.send_weights()
            for url in self.urls:
                call(url, "/reset_prefix_cache", {}, timeout=60)
        except ServerDown as exc:
            raise lost(exc) from None

    def cannot_rejoin(self, urls: list[str]) -> PluginError:
        """The error of servers that hold another version than the group sent: restarted."""
        return lost(f"{', '.join(urls)} hold other weights: restarted")

    def close(self) -> None:
        """Leave the group, and have the servers leave it: those given by ``urls`` outlive the
        run, and a resumed run's trainer forms a new group with them."""
        for url in self.urls:
            # gone, or already left: nothing to release
            with contextlib.suppress(ServerDown, PluginError):
                call(url, "/shutdown_weight_transfer_engine", {}, timeout=60)
        self.engine.shutdown()


__all__ = ["NCCLTransfer", "PolicyWeights", "Servers", "check_engine", "rank_offsets"]
