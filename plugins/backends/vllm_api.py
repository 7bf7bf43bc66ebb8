"""What rlvr says to a `vllm serve` process: one JSON request, and the weight-transfer engine a
server runs with, per ``backend.params.weight_transfer``.

Shared by the server generator (:mod:`rlvr.plugins.backends.vllm_servers`) and the NCCL
transfer (:mod:`rlvr.plugins.backends.vllm_nccl`), which imports no vLLM it does not need here.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from rlvr.plugin import PluginError

#: ``--weight-transfer-config`` of a server fed by a file in /dev/shm (rlvr's own engine)
ENGINE = '{"backend": "rlvr_shm"}'
#: ``--weight-transfer-config`` of a server fed over NCCL (vLLM's engine)
NCCL_ENGINE = '{"backend": "nccl"}'


class ServerDown(Exception):
    """A server did not answer (connection refused or reset, timed out)."""


def call(url: str, path: str, body: dict[str, Any] | None = None, timeout: float = 60.0) -> Any:
    """GET (no body) or POST JSON to ``url + path``; the decoded JSON answer (or its text)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url.rstrip("/") + path, data=data)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise PluginError(f"vLLM server {url}{path}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
        raise ServerDown(f"{url}: {exc}") from exc
    try:
        return json.loads(raw or b"null")
    except json.JSONDecodeError:  # some answers are plain text (/v1/load_lora_adapter's)
        return raw.decode(errors="replace")


__all__ = ["ENGINE", "NCCL_ENGINE", "ServerDown", "call"]
