"""Params models of the built-in backends: light (pydantic only), imported at registration and
by ``rlvr validate``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlvr.plugin import Params


class HFParams(Params):
    """``hf``: sample with transformers ``generate()`` on the training model itself."""

    batch_size: int | None = Field(
        None, ge=1, description="most sequences per generate() call (None: all at once)"
    )
    use_cache: bool = Field(True, description="use the KV cache while generating")
    share_prompt_prefill: bool = Field(
        True,
        description="run a prompt once and share its KV cache among its n completions (off: "
        "each completion re-reads its prompt, as before; needs use_cache)",
    )


class VLLMParams(Params):
    """``vllm``: a colocated in-process vLLM engine, weights synced in place after each step."""

    gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="GPU: share of GPU memory for vLLM (weights + KV cache)"
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPU: tensor-parallel ranks")
    max_num_seqs: int = Field(256, ge=1, description="most sequences decoded together")
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        description="most tokens per engine step (None: vLLM's default, at least "
        "max_model_len on CPU)",
    )
    enforce_eager: bool | None = Field(
        None, description="no CUDA graphs / torch.compile (None: True on CPU, False on GPU)"
    )
    sleep_mode: bool = Field(
        False, description="GPU: free vLLM's memory between rollouts (sleep level 1)"
    )
    kv_cache_space_gb: float = Field(
        2.0, gt=0, description="CPU: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE wins if set)"
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description="CPU: torch threads while generating (None: leave as is, one per core); "
        "1 when another job shares a small host's cores",
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="None: max_prompt_length + max_completion_length (multi-turn episodes: "
        "+ the episode's token budget instead)",
    )
    enable_prefix_caching: bool = Field(
        True,
        description="reuse the KV cache of shared prompt prefixes (a group's prompt, an "
        "episode's earlier turns); reset at every weight sync",
    )
    seed: int | None = Field(None, description="engine seed (None: training.seed)")
    logprobs_mode: Literal["processed", "raw"] = Field(
        "processed",
        description="processed: log-probs of the sampled distribution (temperature, top-k/p); "
        "raw: log-softmax of the logits",
    )
    lora_sync: Literal["auto", "adapter", "merged"] = Field(
        "auto",
        description="a LoRA policy: adapter: vLLM applies the adapter itself and gets only it "
        "after each update (the base weights once); merged: the whole model with the adapter "
        "merged in, every update; auto: adapter where vLLM can apply it (not DoRA, "
        "modules_to_save, embeddings), else merged",
    )
    mode: Literal["colocated", "server"] = Field(
        "colocated",
        description="colocated: one engine in the trainer's process; server: `vllm serve` "
        "processes rlvr starts (servers) or connects to (urls), fed the weights after each "
        "update through vLLM's weight-transfer API",
    )
    urls: list[str] = Field(
        default_factory=list,
        description="server mode: running servers to use (e.g. http://node1:8000), started "
        "with VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config "
        '\'{"backend": "rlvr_shm"}\' on this machine; empty: rlvr starts `servers` itself',
    )
    servers: int = Field(1, ge=1, description="server mode without urls: servers to start")
    server_cpus: list[str] = Field(
        default_factory=list,
        description="server mode, CPU: the cores of each server rlvr starts, as taskset takes "
        "them (e.g. ['1'] or ['2-3', '4-5']); empty: not pinned",
    )
    server_args: list[str] = Field(
        default_factory=list,
        description="server mode: more `vllm serve` arguments for the servers rlvr starts",
    )
    weight_transfer: Literal["shm", "nccl"] = Field(
        "shm",
        description="server mode: how the weights reach the servers. shm: a file in /dev/shm, "
        "servers on the trainer's machine (rlvr's rlvr_shm engine); nccl: a broadcast from the "
        "trainer over vLLM's nccl engine, servers anywhere (CUDA only, servers started with "
        '--weight-transfer-config \'{"backend": "nccl"}\')',
    )
    in_flight_updates: Literal["finish", "pause"] = Field(
        "finish",
        description="server mode with asynchronous rollouts (training.max_staleness >= 1): "
        "finish: an update waits for the rollout in flight, which ends on the old weights; "
        "pause: the servers pause it (vLLM's /pause, mode keep), take the weights and resume "
        "it, so its remaining tokens come from the new weights (faster; not reproducible)",
    )
    startup_timeout: float = Field(
        600.0, gt=0, description="server mode: seconds a server may take to answer /health"
    )
    request_timeout: float = Field(
        600.0, gt=0, description="server mode: seconds one generation request may take"
    )

    @model_validator(mode="after")
    def _server_settings(self) -> VLLMParams:
        server_only = self.urls or self.server_cpus or self.server_args
        if self.mode == "colocated" and (server_only or self.in_flight_updates == "pause"):
            raise ValueError(
                "urls, server_cpus, server_args and in_flight_updates: pause are server-mode "
                "settings; set mode: server (or remove them)"
            )
        if self.weight_transfer == "nccl" and self.lora_sync == "adapter":
            raise ValueError(
                "lora_sync: adapter hands the servers the adapter as a file, which servers on "
                "other machines (weight_transfer: nccl) cannot read; set lora_sync: merged"
            )
        if self.mode == "colocated" and self.weight_transfer != "shm":
            raise ValueError(
                f"weight_transfer: {self.weight_transfer} moves weights to vLLM servers; set "
                "mode: server (the colocated engine shares the trainer's memory)"
            )
        if self.server_cpus and len(self.server_cpus) != self.servers:
            raise ValueError(
                f"server_cpus lists {len(self.server_cpus)} core sets for {self.servers} "
                "server(s); give one per server"
            )
        return self


__all__ = ["HFParams", "VLLMParams"]
