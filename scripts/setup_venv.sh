#!/usr/bin/env bash
# Creates (or reuses) the Python venv that provides libtorch and the Python reference libraries,
# outside the checkout so that a clean clone reuses it. Prints the venv's path on stdout.
# A venv whose installed pins match python/requirements.txt is reused as is.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/python/requirements.txt"
venv="${CTITAN_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ctitan/venv}"
stamp="$venv/.ctitan-requirements"

if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then
  echo "$venv"
  exit 0
fi

python=""
for candidate in python3.11 python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import venv, ensurepip' 2>/dev/null; then
    python="$candidate"; break
  fi
done
if [ -z "$python" ]; then
  echo "setup_venv: no python3 with the venv module; install python3-venv (apt-get install -y python3-venv)" >&2
  exit 1
fi

echo "setup_venv: installing python/requirements.txt into $venv (torch with its CUDA wheels is ~5 GB)" >&2
mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  -r "$requirements" >&2
cp "$requirements" "$stamp"
echo "$venv"
