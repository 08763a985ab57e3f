#!/usr/bin/env bash
# Build here, run on the GPU machine (docs/GPU.md). Builds build-gpu/ against torch 2.11.0, the
# GPU machine's libtorch (scripts/check_libtorch.sh), then gathers into gpu-bundle/ what
# scripts/gpu/run.sh needs there, within the 64 MiB a run may carry:
#   bin/   ctitan, ctitan_tests, gpu_throughput and the test workers
#   lib/   libctitan_cuda.so and every shared library the binaries need that is neither libtorch's
#          (the GPU machine's torch provides those) nor the C/C++ runtime's
#   ctest files of build-gpu (paths rewritten by run.sh), BUILD_ROOT (build-gpu's path here)
# Then it checks that the bundle starts against a libtorch other than the one it was linked with
# (the venv-free copy in ~/.cache/ctitan/torch-2.11.0, through LD_LIBRARY_PATH as run.sh does).
#
#   scripts/gpu/prepare.sh
#   then, with the device tool: run(command="scripts/gpu/run.sh out", carry=["gpu-bundle"])
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-gpu"
bundle="$root/gpu-bundle"
version=2.11.0

# Without Arrow: libarrow and libparquet (61 MB) would not fit the 64 MiB a run carries; the
# GPU checks read no Parquet (its tests skip there, saying so).
CTITAN_WITH_ARROW=OFF BUILD_DIR="$build" "$root/scripts/check_libtorch.sh" "$version"
torch_lib="$(realpath "$(cat "$build/torch-site-packages")/torch/lib")"

rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/tests"
for program in ctitan ctitan_tests gpu_throughput collective_timeout_worker rpc_test_worker; do
  [ -x "$build/bin/$program" ] && cp "$build/bin/$program" "$bundle/bin/"
done
strip --strip-debug "$bundle"/bin/*
cp "$build"/lib/libctitan_cuda.so "$bundle/lib/"
cp "$build/CTestTestfile.cmake" "$bundle/"
cp "$build"/tests/CTestTestfile.cmake "$build"/tests/ctitan_test_suites*.cmake "$bundle/tests/"
echo "$build" > "$bundle/BUILD_ROOT"

# The libraries to carry: what ldd resolves outside libtorch's folder, the CUDA toolkit and the
# C/C++ runtime (glibc, libstdc++, libgcc_s: the GPU machine has its own, as new or newer).
# CUDA's own libraries (cudart, cupti, cublas, nccl, nvrtc, ...) come with the machine's torch.
runtime='/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s|libutil|libgomp|libcuda|libcu[A-Za-z]*|libnv[A-Za-z]*|libnccl)\.so'
for binary in "$bundle"/bin/* "$bundle"/lib/libctitan_cuda.so; do
  LD_LIBRARY_PATH="$torch_lib" ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  real="$(realpath "$lib")"
  case "$real" in "$torch_lib"/*) continue ;; esac  # libtorch's own: the machine's torch has them
  echo "$lib" | grep -qE "$runtime" && continue
  cp -L "$lib" "$bundle/lib/"
done
missing="$(for binary in "$bundle"/bin/*; do LD_LIBRARY_PATH="$bundle/lib:$torch_lib" ldd "$binary"; done | grep 'not found' | sort -u || true)"
[ -z "$missing" ] || { echo "prepare: unresolved libraries:"$'\n'"$missing" >&2; exit 1; }

size_kib="$(du -sk "$bundle" | cut -f1)"
echo "prepare: gpu-bundle/ is $((size_kib / 1024)) MiB: $(ls "$bundle/bin" | tr '\n' ' ')" >&2
ls "$bundle/lib" >&2
if [ "$size_kib" -gt $((60 * 1024)) ]; then
  echo "prepare: gpu-bundle/ is over 60 MiB; a device run carries at most 64 MiB with the tree" >&2
  exit 1
fi

# The bundle alone (no build tree, no RUNPATH into it) against that libtorch, as on the GPU machine.
check="$(mktemp -d)"
trap 'rm -rf "$check"' EXIT
cp -r "$bundle" "$check/gpu-bundle"
mv "$build" "$build.hidden"
trap 'mv "$build.hidden" "$build"; rm -rf "$check"' EXIT
LD_LIBRARY_PATH="$check/gpu-bundle/lib:$torch_lib" "$check/gpu-bundle/bin/ctitan" --version >&2
LD_LIBRARY_PATH="$check/gpu-bundle/lib:$torch_lib" "$check/gpu-bundle/bin/ctitan_tests" --gtest_list_tests \
  --gtest_filter='Gpu*' | grep -c '^  ' | xargs -I{} echo "prepare: the bundle's ctitan_tests lists {} GPU tests" >&2
