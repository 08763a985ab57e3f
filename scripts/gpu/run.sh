#!/usr/bin/env bash
# On the GPU machine, from the repository root, with gpu-bundle/ (scripts/gpu/prepare.sh) carried
# along: every GPU test, then the GPU benchmark, each log under OUTDIR. Within 8 minutes.
#
#   scripts/gpu/run.sh OUTDIR
#
# The binaries were linked here against torch 2.11.0's libraries; there they load the machine's
# own torch 2.11 (python3's torch package: its lib/ first on LD_LIBRARY_PATH), and libtorch_cuda
# finds its CUDA and NCCL libraries through its own RUNPATH. CTITAN_GPU_PYTHON names another
# python (this script's test here: a venv with torch 2.11 and no GPU, where every GPU test skips).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: scripts/gpu/run.sh OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
bundle="$root/gpu-bundle"
python="${CTITAN_GPU_PYTHON:-python3}"
[ -x "$bundle/bin/ctitan" ] || { echo "run: no $bundle/bin/ctitan: run scripts/gpu/prepare.sh on the build machine and carry gpu-bundle" >&2; exit 1; }

torch_lib="$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')" || {
  echo "run: $python cannot import torch" >&2; exit 1; }
export LD_LIBRARY_PATH="$bundle/lib:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CTITAN_PYTHON="$(command -v "$python")"
# The tests start these, and read the sources (reference scripts), here, not on the build machine.
export CTITAN_BIN="$bundle/bin/ctitan" CTITAN_SOURCE_DIR="$root"

# The ctest files name build-gpu's paths on the build machine: point them at the bundle here.
built_at="$(cat "$bundle/BUILD_ROOT")"
find "$bundle" -name '*.cmake' -exec sed -i "s#$built_at#$bundle#g" {} +

status=0
{
  date -u
  nvidia-smi || echo "nvidia-smi: not available"
  "$python" -c 'import torch; print("python torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
  "$bundle/bin/ctitan" --version
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

# Every GPU test; a skip prints "no CUDA device" and counts as skipped, not passed.
(cd "$bundle" && timeout 300 ctest -L gpu --output-on-failure --timeout 240) > "$out/ctest-gpu.log" 2>&1 || status=1
tail -n 25 "$out/ctest-gpu.log"

if [ -x "$bundle/bin/gpu_throughput" ]; then
  BENCH_PYTHON="$python" BENCH_SOURCE_DIR="$root" timeout 240 "$bundle/bin/gpu_throughput" > "$out/gpu_throughput.log" 2>&1 || status=1
  tail -n 25 "$out/gpu_throughput.log"
else
  echo "run: gpu_throughput was not built" | tee "$out/gpu_throughput.log"
fi
exit $status
