#!/usr/bin/env bash
# Installs the Debian packages ctitan needs, only those missing. libtorch itself comes from PyPI's
# torch wheel (scripts/setup_venv.sh), not from Debian. As root it runs apt-get;
# otherwise it prints the exact command to run and fails.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  ninja-build     # the generator of new build directories (Makefile: NEW_DIR_GENERATOR)
  libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev
  nlohmann-json3-dev libgtest-dev libpcre2-dev
  libzstd-dev zlib1g-dev   # .jsonl.zst / .jsonl.gz datasets
  zstd            # bench/data_prepare.py's .zst row
  python3-venv    # the venv that provides libtorch (scripts/setup_venv.sh)
  libgloo-dev     # declarations ProcessGroupGloo.hpp includes; the torch wheel does not ship them
  fortunes        # the demo corpus
  iproute2        # `ip netns`: the multi-node test's two hosts (tests/launcher/multi_node_netns_test.cpp)
  clang libclang-rt-dev   # libFuzzer + sanitizers: `make fuzz`, run by CI as `make fuzz-smoke`
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
