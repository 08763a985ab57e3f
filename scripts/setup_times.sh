#!/usr/bin/env bash
# Times each stage of `make demo` on this machine, as a new user meets them, then the compile time
# per unit and per target (scripts/build_times.py):
#   scripts/setup_times.sh [BUILD_DIR]      (default: build-times, a build directory of its own)
# Stages: apt (scripts/install_deps.sh), venv (scripts/setup_venv.sh), configure (cmake), build
# (the library, ctitan and the demo tokenizer: `make build`), demo to its first logged training
# step, and demo to its end. A stage with nothing to do (packages present, venv with matching pins,
# a build directory already built) takes the seconds its check takes, and the line says so only
# through that figure: run it on a fresh machine, from a fresh clone, for the set-up figures.
# Log of each stage: BUILD_DIR/setup-times/<stage>.log.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build-times}"
cd "$root"
logs="$build/setup-times"
mkdir -p "$logs"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
report() { printf '%-22s %8s s\n' "$1" "$2"; }

start=$(now)
scripts/install_deps.sh > "$logs/apt.log" 2>&1 || { echo "setup_times: apt failed, see $logs/apt.log" >&2; exit 1; }
t_apt=$(now)
venv=$(scripts/setup_venv.sh 2> "$logs/venv.log") || { echo "setup_times: venv failed, see $logs/venv.log" >&2; exit 1; }
t_venv=$(now)
generator=()
[ -f "$build/CMakeCache.txt" ] || generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCTITAN_PYTHON="$venv/bin/python" \
  > "$logs/configure.log" 2>&1 || { echo "setup_times: configure failed, see $logs/configure.log" >&2; exit 1; }
t_configure=$(now)
cmake --build "$build" -j "${JOBS:-2}" --target ctitan demo_assets > "$logs/build.log" 2>&1 \
  || { echo "setup_times: build failed, see $logs/build.log" >&2; exit 1; }
t_build=$(now)

# The demo as `make demo` runs it; the first "step:" line is the first logged training step.
dtype=float32  # the Makefile's DEMO_DTYPE rule: bf16 only with bf16 instructions
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && dtype=bfloat16
t_first_step=""
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$logs/demo.log"
  if [ -z "$t_first_step" ] && [[ "$line" == *"step:"* ]]; then t_first_step=$(now); fi
done < <("$build/bin/ctitan" run --nproc-per-node 2 --master-port 0 --local-ranks-filter 0 train \
           --config configs/llama3_debug.toml --training.mixed_precision_param "$dtype" \
           --job.dump_folder "$build/setup-times/demo-run" 2>&1)
t_demo=$(now)
[ -n "$t_first_step" ] || { echo "setup_times: the demo logged no step, see $logs/demo.log" >&2; exit 1; }

report apt "$(elapsed "$start" "$t_apt")"
report venv "$(elapsed "$t_apt" "$t_venv")"
report configure "$(elapsed "$t_venv" "$t_configure")"
report build "$(elapsed "$t_configure" "$t_build")"
report "demo, to first step" "$(elapsed "$t_build" "$t_first_step")"
report "demo, to its end" "$(elapsed "$t_build" "$t_demo")"
report "total, to first step" "$(elapsed "$start" "$t_first_step")"
report "total, to demo's end" "$(elapsed "$start" "$t_demo")"
echo
python3 scripts/build_times.py "$build" --top 15
