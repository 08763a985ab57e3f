#!/bin/bash
# Are two ctitan binaries' training results the same, bit for bit? For refactors that must not
# move a number (issue #30: "Llama 3 results unchanged bit for bit"). Trains the Llama 3 debug
# model in fp32 for 20 steps, every step logged, with each binary: in one process, FSDP(2), DDP(2),
# TP(2), PP(2), interleaved PP(2), HSDP(2x2) and FSDP(2)xTP(2), with accumulated microbatches (4
# in one process, 1 under HSDP) and validation on; then compares every step's loss, grad_norm and
# validation loss (metrics.jsonl keeps all float bits). Extra flags apply to every run (e.g.
# --model.name qwen3).
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
        --training.seq_len 128 --training.device cpu --training.local_batch_size 2
        --training.global_batch_size 8 --validation.enable true --validation.freq 10 --validation.steps 2 "$@")
# name, processes, then the flags of the launched layouts ("one" runs without the launcher).
layouts=("one 1" "fsdp 2 --parallelism.data_parallel_shard_degree 2"
         "ddp 2 --parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 1"
         "tp 2 --parallelism.data_parallel_shard_degree 1 --parallelism.tensor_parallel_degree 2"
         "pp 2 --parallelism.data_parallel_shard_degree 1 --parallelism.pipeline_parallel_degree 2"
         "ipp 2 --parallelism.data_parallel_shard_degree 1 --parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule Interleaved1F1B"
         "hsdp 4 --parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 2"
         "fsdp_tp 4 --parallelism.data_parallel_shard_degree 2 --parallelism.tensor_parallel_degree 2")
for side in old new; do
  bin=${!side}
  for layout in "${layouts[@]}"; do
    read -r name nproc flags <<< "$layout"
    if [ "$name" = one ]; then cmd=("$bin" train); else cmd=("$bin" run --nproc-per-node "$nproc" --master-port 0 train); fi
    # shellcheck disable=SC2086  # flags split into words on purpose
    CTITAN_NUM_THREADS=1 "${cmd[@]}" "${common[@]}" $flags --job.dump_folder "$work/$side/$name" \
      > "$work/$side-$name.log" 2>&1 || { echo "$side $name failed:"; tail -5 "$work/$side-$name.log"; exit 1; }
  done
done
python3 - "$work" <<'PY'
import json, sys
work, failed = sys.argv[1], False
for run in ("one", "fsdp", "ddp", "tp", "pp", "ipp", "hsdp", "fsdp_tp"):
    rows, validation = {}, {}
    for side in ("old", "new"):
        with open(f"{work}/{side}/{run}/metrics.jsonl") as f:
            records = list(map(json.loads, f))
        rows[side] = [(r["step"], r["loss"], r["grad_norm"]) for r in records if "grad_norm" in r]
        validation[side] = [(r["step"], r["validation_loss"]) for r in records if "validation_loss" in r]
    same = rows["old"] == rows["new"] and len(rows["new"]) == 20 and validation["old"] == validation["new"]
    same = same and len(validation["new"]) == 2
    failed |= not same
    print(f"{run:5s}: {len(rows['new'])} steps, {len(validation['new'])} validations, loss, grad_norm and "
          f"validation loss bitwise equal: {same} "
          f"(last loss {rows['old'][-1][1]!r} vs {rows['new'][-1][1]!r})")
sys.exit(1 if failed else 0)
PY
