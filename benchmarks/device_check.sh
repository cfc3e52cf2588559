#!/usr/bin/env bash
# The GPU checks, as one script for a lent CUDA machine whose python3 already has torch and transformers (no network):
# the wheels gencache needs beyond those (pydantic, msgspec, ray and theirs) are carried in .whl/.
# Usage: bash benchmarks/device_check.sh OUTDIR   (the GPU tests, the --gpu benchmark, a two-worker --ray run)
set -uo pipefail
out=${1:?output directory}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks
nvidia-smi -L | tee "$out/device.txt"
python3 -c "import torch, transformers, ray; print('torch', torch.__version__, 'transformers', transformers.__version__, 'ray', ray.__version__)" | tee -a "$out/device.txt"
timeout 120 python3 -m pytest tests/test_gpu.py -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$out/gpu_tests.log"
timeout 150 python3 benchmarks/bench_generation.py --gpu --no-vllm --prompts 48 --max-new-tokens 96 \
    --batch-sizes 16,48 --concurrencies 48 2>&1 | tee "$out/gpu_bench.md"
PYTHON=python3 bash benchmarks/gpu_ray_check.sh 2>&1 | tee "$out/gpu_ray.log"
