#!/bin/bash
# Are two ctitan binaries' training results the same, bit for bit? For refactors that must not
# move a number (issue #30: "Llama 3 results unchanged bit for bit"). Trains the Llama 3 debug
# model in fp32 for 20 steps, every step logged, with each binary: in one process, FSDP(2) and
# TP(2); then compares every step's loss and grad_norm (metrics.jsonl keeps all float bits).
#
#   scripts/compare_losses.sh OLD/bin/ctitan NEW/bin/ctitan [extra train flags...]
#
# Build OLD from a worktree: git worktree add /tmp/old REV && cmake -S /tmp/old -B /tmp/old/build
# -G Ninja -DCMAKE_BUILD_TYPE=Release -DCTITAN_PYTHON=$(scripts/setup_venv.sh)/bin/python &&
# cmake --build /tmp/old/build --target ctitan. Run from the repository root after `make build`
# (the debug config's tokenizer is build/assets/fortunes_2k.model). Exit 1 if any run differs.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OLD_CTITAN NEW_CTITAN [train flags...]" >&2; exit 2; }
old=$1 new=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config configs/llama3_debug.toml --training.steps 20 --metrics.log_freq 1
        --training.mixed_precision_param float32 --metrics.peak_flops 1e12 --comm.link_gbytes_per_s 1
        --training.seq_len 128 --training.device cpu "$@")
launch=(run --nproc-per-node 2 --master-port 0 train)
for side in old new; do
  bin=${!side}
  CTITAN_NUM_THREADS=1 "$bin" train "${common[@]}" --job.dump_folder "$work/$side/one" > "$work/$side-one.log" 2>&1
  CTITAN_NUM_THREADS=1 "$bin" "${launch[@]}" "${common[@]}" --job.dump_folder "$work/$side/fsdp" \
    --parallelism.data_parallel_shard_degree 2 > "$work/$side-fsdp.log" 2>&1
  CTITAN_NUM_THREADS=1 "$bin" "${launch[@]}" "${common[@]}" --job.dump_folder "$work/$side/tp" \
    --parallelism.data_parallel_shard_degree 1 --parallelism.tensor_parallel_degree 2 > "$work/$side-tp.log" 2>&1
done
python3 - "$work" <<'PY'
import json, sys
work, failed = sys.argv[1], False
for run in ("one", "fsdp", "tp"):
    rows = {}
    for side in ("old", "new"):
        with open(f"{work}/{side}/{run}/metrics.jsonl") as f:
            rows[side] = [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, f) if "grad_norm" in r]
    same = rows["old"] == rows["new"] and len(rows["new"]) == 20
    failed |= not same
    print(f"{run:5s}: {len(rows['new'])} steps, loss and grad_norm bitwise equal: {same} "
          f"(last loss {rows['old'][-1][1]!r} vs {rows['new'][-1][1]!r})")
sys.exit(1 if failed else 0)
PY
