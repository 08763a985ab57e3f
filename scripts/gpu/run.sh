#!/usr/bin/env bash
# On the GPU machine, from the repository root, with gpu-bundle/ (scripts/gpu/prepare.sh) carried
# along: every GPU test, then the GPU benchmark, each log under OUTDIR. Within 8 minutes.
#
#   scripts/gpu/run.sh OUTDIR
#
# The binaries were linked here against torch 2.11.0's libraries; there they load the machine's
# own torch 2.11: python3's torch package's lib/ and the nvidia-* wheels' libraries beside it come
# first on LD_LIBRARY_PATH. CTITAN_GPU_PYTHON names another python (this script's test on the
# build machine: one whose path holds a copy of torch 2.11's libraries and no GPU, where every GPU
# test skips; docs/GPU.md). Time limits: the GPU tests 4 min, the benchmark 3.5 min (BENCH_ROWS
# picks fewer rows).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: scripts/gpu/run.sh OUTDIR}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
bundle="$root/gpu-bundle"
python="${CTITAN_GPU_PYTHON:-python3}"
[ -x "$bundle/bin/ctitan" ] || { echo "run: no $bundle/bin/ctitan: run scripts/gpu/prepare.sh on the build machine and carry gpu-bundle" >&2; exit 1; }

# Where python's torch package is, without importing it (find_spec only locates it).
torch_dir="$("$python" -c 'import importlib.util as u; s = u.find_spec("torch"); print(s.submodule_search_locations[0])')" || {
  echo "run: $python has no torch package" >&2; exit 1; }
# torch/lib, and the CUDA, cuDNN and NCCL wheels' libraries beside it (site-packages/nvidia/*/lib).
libs="$bundle/lib:$torch_dir/lib"
for dir in "$(dirname "$torch_dir")"/nvidia/*/lib; do [ -d "$dir" ] && libs="$libs:$dir"; done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
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

# Every GPU test, one ctest entry per suite; a skip prints "no CUDA device" and makes its entry
# skipped (exit 77), not passed. The per-entry limit covers a whole suite.
(cd "$bundle" && timeout 240 ctest -L gpu --output-on-failure --timeout 230) > "$out/ctest-gpu.log" 2>&1 || status=1
tail -n 25 "$out/ctest-gpu.log"

if [ -x "$bundle/bin/gpu_throughput" ]; then
  BENCH_PYTHON="$python" BENCH_SOURCE_DIR="$root" timeout 210 "$bundle/bin/gpu_throughput" > "$out/gpu_throughput.log" 2>&1 || status=1
  tail -n 25 "$out/gpu_throughput.log"
else
  echo "run: gpu_throughput was not built" | tee "$out/gpu_throughput.log"
fi
exit $status
