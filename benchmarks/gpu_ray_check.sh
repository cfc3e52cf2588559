#!/usr/bin/env bash
# On a machine with one GPU: two `generate --ray` teacher workers share it (--worker-gpus 0.5) over the tiny teacher;
# prints the Ray run's summary JSON and whether every key's content digest equals `--shards 8` in one process.
# Exit 0 when they are equal; about a minute once the packages are there.
#   bash benchmarks/gpu_ray_check.sh [--device cpu]
# The interpreter: $PYTHON if set; else .venv/bin/python when the environment was carried; else the machine's
# python3 with the wheels in .whl/ (ray, pydantic, msgspec, ... for its Python) installed to /tmp/site and this
# checkout's src/ on the path (a lent H200 has torch and transformers but neither ray nor pydantic).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then
    PYTHON=.venv/bin/python
  else
    PYTHON=python3
    if [ -d .whl ]; then
      "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    fi
    export PYTHONPATH="/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # the workers inherit it through the raylet
  fi
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
"$PYTHON" -c "import ray, torch, transformers; print('ray', ray.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
exec timeout 230 "$PYTHON" benchmarks/gpu_ray_check.py "$@"
