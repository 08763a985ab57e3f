#!/bin/sh
# Op-level profile of each train_throughput row, fused kernels on and off (CTITAN_DISABLE_FUSED=all):
# runs `ctitan train` for 2 steps with [profiling] on, tracing step 2 (step 1 includes one-time
# setup such as oneDNN kernel generation). Traces and self-time summaries land in
# $OUT/<row>_<fused|unfused>/profile_traces/iteration_2/. Usage: bench/profile_rows.sh [OUT]
set -e
OUT=${1:-/tmp/ctitan_profiles}
BIN=${CTITAN_BIN:-build/bin/ctitan}
row() {  # name config seq batch dtype
  for mode in fused unfused; do
    disable=""; [ $mode = unfused ] && disable=all
    CTITAN_DISABLE_FUSED=$disable $BIN train --config "$2" --training.seq_len "$3" --training.local_batch_size "$4" \
      --training.mixed_precision_param "$5" --training.steps 2 --validation.enable false --metrics.log_freq 1 \
      --metrics.peak_flops 1e12 --profiling.enable_profiling true --profiling.profile_freq 2 \
      --job.dump_folder "$OUT/$1_$mode" > "$OUT/$1_$mode.log" 2>&1
    echo "== $1 $mode"; head -12 "$OUT/$1_$mode/profile_traces/iteration_2/rank0_summary.txt"
    tail -1 "$OUT/$1_$mode/profile_traces/iteration_2/rank0_summary.txt"
  done
}
mkdir -p "$OUT"
row debug_s256_b8_bf16 configs/llama3_debug.toml 256 8 bfloat16
row debug_s256_b8_fp32 configs/llama3_debug.toml 256 8 float32
row debug_s2048_b1_bf16 configs/llama3_debug.toml 2048 1 bfloat16
row 134M_s512_b4_bf16 configs/llama3_134m.toml 512 4 bfloat16
