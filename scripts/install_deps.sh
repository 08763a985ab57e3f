#!/usr/bin/env bash
# Installs the Debian packages ctitan needs, only those missing. As root it runs apt-get;
# otherwise it prints the exact command to run and fails.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas0-pthread   # fp32 matmul: without it, libblas.so.3 is the slow reference BLAS
  libtorch-dev libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev
  nlohmann-json3-dev libgtest-dev libpcre2-dev
  libgloo-dev     # ProcessGroupGloo.hpp includes gloo headers
  python3-torch   # the PyTorch-eager baseline of `make bench`
  fortunes        # the demo corpus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "missing packages; run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" > /dev/null
