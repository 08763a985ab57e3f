#!/usr/bin/env bash
# Builds ctitan (library, CLI, tests, benchmarks: every source) against the libtorch of one torch
# wheel version, in build-torch-VERSION/ (or BUILD_DIR). ctitan supports libtorch 2.11 through 2.15
# (src/ctitan/common/torch_versions.h says what differs).
#
#   scripts/check_libtorch.sh 2.11.0      # the GPU machine's torch (2.11.0+cu130)
#   scripts/check_libtorch.sh 2.15.0      # the venv's pin (python/requirements.txt)
#
# The wheel is downloaded once into ~/.cache/ctitan/wheels (pip download, no dependencies) and its
# headers, libraries and CMake files are unpacked into ~/.cache/ctitan/torch-VERSION/site-packages,
# with the NCCL wheel it pins (nvidia-nccl-cu*: nccl.h and libnccl) beside it, the layout of an
# installed wheel. The build links too, so the test binaries must start against that libtorch
# (their tests are listed by running them). The venv's own torch, when it is that version, is used
# as it is.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${1:?usage: scripts/check_libtorch.sh TORCH_VERSION (e.g. 2.11.0)}"
build="${BUILD_DIR:-$root/build-torch-$version}"
jobs="${JOBS:-2}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ctitan"
venv="$("$root/scripts/setup_venv.sh")"
python="$venv/bin/python"

venv_version="$("$python" -c 'import torch; print(torch.__version__.split("+")[0])')"
if [ "$venv_version" = "$version" ]; then
  site="$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
else
  site="$cache/torch-$version/site-packages"
  if [ ! -f "$site/torch/share/cmake/Torch/TorchConfig.cmake" ]; then
    mkdir -p "$cache/wheels"
    wheel="$(ls "$cache"/wheels/torch-"$version"-*.whl 2>/dev/null | head -1 || true)"
    if [ -z "$wheel" ]; then
      echo "check_libtorch: downloading torch==$version (no dependencies) into $cache/wheels" >&2
      "$python" -m pip download --quiet --disable-pip-version-check --no-deps "torch==$version" -d "$cache/wheels" >&2
      wheel="$(ls "$cache"/wheels/torch-"$version"-*.whl | head -1)"
    fi
    rm -rf "$site.partial" && mkdir -p "$site.partial"
    # Headers, libraries and CMake files: what a C++ build needs of the wheel (not its Python).
    "$python" - "$wheel" "$site.partial" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(("torch/include/", "torch/lib/", "torch/share/")) or name in ("torch/version.py",) \
                or name.endswith(".dist-info/METADATA"):
            z.extract(name, out)
PY
    chmod -R u+rwX "$site.partial"
    # The NCCL wheel this torch pins (Requires-Dist: nvidia-nccl-cuNN==X): nccl.h for ProcessGroupNCCL.
    nccl="$(grep -ho 'Requires-Dist: nvidia-nccl-cu[0-9]*==[0-9.]*' "$site.partial"/torch-*.dist-info/METADATA | head -1 | cut -d' ' -f2 || true)"
    if [ -n "$nccl" ]; then
      nccl_wheel="$(ls "$cache"/wheels/"$(echo "${nccl%%==*}" | tr - _)"-"${nccl##*==}"-*.whl 2>/dev/null | head -1 || true)"
      if [ -z "$nccl_wheel" ]; then
        echo "check_libtorch: downloading $nccl into $cache/wheels" >&2
        "$python" -m pip download --quiet --disable-pip-version-check --no-deps "$nccl" -d "$cache/wheels" >&2
        nccl_wheel="$(ls "$cache"/wheels/"$(echo "${nccl%%==*}" | tr - _)"-"${nccl##*==}"-*.whl | head -1)"
      fi
      "$python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$nccl_wheel" "$site.partial"
    fi
    rm -rf "$site" && mv "$site.partial" "$site"
  fi
fi

echo "check_libtorch: building every target against torch $version ($site/torch) in $build" >&2
# CTITAN_PYTHON stays the venv's: tests that compare with transformers use it at run time.
mkdir -p "$build"
cmake -S "$root" -B "$build" $([ -f "$build/CMakeCache.txt" ] || echo -G Ninja) -DCMAKE_BUILD_TYPE=Release \
  -DTorch_DIR="$site/torch/share/cmake/Torch" -DCTITAN_PYTHON="$python" -DCTITAN_WITH_ARROW="${CTITAN_WITH_ARROW:-ON}" \
  > "$build/configure.log" 2>&1 \
  || { cat "$build/configure.log" >&2; exit 1; }
grep -E "^-- ctitan: libtorch" "$build/configure.log" >&2 || true
cmake --build "$build" -j "$jobs"
echo "$site" > "$build/torch-site-packages"  # where this build's libtorch is (scripts/gpu/prepare.sh)
built="$("$build/bin/ctitan" --version | head -1)"
echo "check_libtorch: torch $version: every target built; $built" >&2
