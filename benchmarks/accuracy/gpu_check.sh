#!/usr/bin/env bash
# Measure a subset of cases on a real CUDA GPU, and the same cases under fake mode on that host's
# CPU (same torch/transformers versions), so tracker / fake / torch.cuda figures can be compared.
#
#   bash benchmarks/accuracy/gpu_check.sh OUTDIR [FIXTURES_DIR]
#
# Needs python3 with torch (CUDA) + transformers + peft.  If benchmarks/accuracy/.gpu/*.whl exist
# (e.g. the transformers/peft versions used for measured.json) they are installed to /tmp/site first.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
OUTDIR="${1:?OUTDIR}"
FIX="${2:-$HERE/.gpu/models}"   # the GPU host has no ../shared: copy the needed config folders there
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
if ls "$HERE"/.gpu/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$HERE"/.gpu/*.whl \
    && export PYTHONPATH=/tmp/site
fi
{
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'peft', peft.__version__)"
} 2>&1 | tee "$OUTDIR/env.txt"

CUDA_IDS=(
  llama3.2-1b-train-bf16-foreach-b2-s512
  qwen3-0.6b-serve-b4-s1024
  llama3.1-8b-serve-b4-s2048-t16
  llama3.2-1b-train-mixed-fused-ckpt-b8-s1024
  llama3.1-8b-lora-r16-qkvo-b2-s512
  gpt2-train-mixed-foreach-b8-s1024
  deepseek-v3-L4-serve-b2-s2048-t16
  qwen3-30b-a3b-L4-train-bf16-foreach-b2-s1024
  llama3.2-1b-train-bf16-fused-b4-s1024
  llama3.1-8b-serve-b4-s2048-t16-eager
  qwen3-30b-a3b-L8-serve-b4-s2048-t16
  llama3.1-8b-train-bf16-foreach-b1-s2048
  deepseek-v3-L2-train-bf16-fused-b1-s1024
)
FAKE_EXTRA=(gpt2-train-mixed-foreach-b8-s1024-cudaemu deepseek-v3-L4-serve-b2-s2048-t16-cudaemu
            deepseek-v3-L2-train-bf16-fused-b1-s1024-cudaemu)

# fake runs on the CPU in the background while the GPU works
python3 "$HERE/run_cases.py" --device fake --fixtures "$FIX" --out "$OUTDIR/measured_fake_gpuhost.json" \
  --only "${CUDA_IDS[@]}" "${FAKE_EXTRA[@]}" > "$OUTDIR/fake.log" 2>&1 &
FAKE_PID=$!
python3 "$HERE/run_cases.py" --device cuda --fixtures "$FIX" --out "$OUTDIR/measured_cuda.json" \
  --timeout "${CASE_TIMEOUT:-150}" --only "${CUDA_IDS[@]}" 2>&1 | tee "$OUTDIR/cuda.log"
wait $FAKE_PID
cat "$OUTDIR/fake.log" | tail -20
