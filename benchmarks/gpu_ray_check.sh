#!/usr/bin/env bash
# On a machine with one GPU: two `generate --ray` teacher workers share it (--worker-gpus 0.5) over the tiny teacher;
# prints the Ray run's summary JSON and whether every key's content digest equals `--shards 8` in one process.
# Exit 0 when they are equal. Takes about a minute once the environment exists.
#   bash benchmarks/gpu_ray_check.sh [--device cpu]   (PYTHON=... to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PYTHON=$(command -v "${PYTHON:-.venv/bin/python}" || true)
if [ -z "$PYTHON" ]; then  # no environment carried here: build it from uv's cache, without the network
  uv sync --frozen --offline
  PYTHON=.venv/bin/python
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
exec timeout 230 "$PYTHON" benchmarks/gpu_ray_check.py "$@"
