#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for SECONDS each, FUZZ_JOBS at a time (default 1;
# each fuzzer is one process on one core), at the lowest CPU priority:
# fuzz/run_all.sh SECONDS [target ...]. `make fuzz` builds build-fuzz and calls this.
# Seeds are read from fuzz/corpus/<target>/ and never written; what the fuzzer learns goes to
# build-fuzz/corpus/<target>/, crashing inputs to build-fuzz/artifacts/<target>/, the log to
# build-fuzz/logs/<target>/fuzz-0.log. Each run is appended to build-fuzz/fuzz_runs.tsv.
# FUZZ_RUNS=N also stops each target after N executions (whichever of the two limits comes first):
# FUZZ_RUNS=400000 fuzz/run_all.sh 3600 config reaches an execution count on a loaded machine.
# Exits 1 if any target found a crash, leak, sanitizer report, timeout or out-of-memory.
set -euo pipefail
seconds=${1:?usage: fuzz/run_all.sh SECONDS [target ...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tiktoken hf_tokenizer_json checkpoint_metadata token_file metrics_jsonl
                                     jsonl_documents config safetensors rpc_wire dist_env)
# The targets write each input to a file: on tmpfs that costs no disk I/O.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
ledger=$build/fuzz_runs.tsv
[ -f "$ledger" ] || printf 'start_utc\ttarget\tseconds\tcpu_seconds\texecs\texecs_per_s\tcorpus_files\tpeak_rss_mb\tresult\n' > "$ledger"
failed=0
# User + system CPU seconds of this shell's finished children (bash's `times`, second line; run
# in the target's shell, not in a $(...) subshell, which has children of its own). $t: the
# target being run (run_target's local), so parallel runs use files of their own.
cpu_seconds() {
  times > "$build/.times.$t"
  tail -1 "$build/.times.$t" | awk '{ split($1, u, "m"); split($2, s, "m"); printf "%d\n", u[1] * 60 + u[2] + s[1] * 60 + s[2] }'
}
# One target, in a subshell of its own when FUZZ_JOBS > 1: its row and its line go to files that
# the loop below appends in the targets' order once every run has ended.
run_target() {
  local t=$1
  bin=$build/bin/${t}_fuzzer
  [ -x "$bin" ] || { echo "fuzz: $bin is missing: build build-fuzz first (make fuzz)" >&2; exit 2; }
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t" "$build/logs/$t"
  start=$(date -u +%FT%TZ)
  t0=$(date +%s)
  cpu_seconds > "$build/.cpu0.$t"
  # -jobs=1 -workers=1: the fuzzing runs in a child whose output is logs/<t>/fuzz-0.log.
  # -timeout=10: an input taking 10 s is a hang. -rss_limit_mb: beyond it, an out-of-memory finding.
  (cd "$build/logs/$t" && rm -f fuzz-0.log &&
   nice -n 19 "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -jobs=1 -workers=1 \
     ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" "$build/corpus/$t" "$root/fuzz/corpus/$t" \
     > runner.log 2>&1) || true
  elapsed=$(( $(date +%s) - t0 ))
  cpu_seconds > "$build/.cpu1.$t"
  cpu=$(( $(cat "$build/.cpu1.$t") - $(cat "$build/.cpu0.$t") ))
  log=$build/logs/$t/fuzz-0.log
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{print $2}' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | awk '{print $2}' | tail -1)
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | awk '{print $2}' | tail -1)
  if grep -qE '^==[0-9]+==ERROR|^SUMMARY: |deadly signal|ERROR: libFuzzer' "$log"; then
    result="FINDING: $(grep -m1 -E '^SUMMARY: |ERROR: libFuzzer' "$log" | cut -c1-120); $(ls -t "$build/artifacts/$t" | head -1)"
    # The log may be all a CI run leaves behind: show the report itself.
    grep -A 40 -m1 -E '^==[0-9]+==ERROR|deadly signal|ERROR: libFuzzer' "$log" >&2 || true
    # A crash ends the run before the final stats: count the units from the last status line.
    [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  else
    result=ok
  fi
  corpus=$(find "$build/corpus/$t" -type f | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$start" "$t" "$elapsed" "$cpu" "${execs:-?}" "${rate:-?}" "$corpus" "${rss:-?}" "$result" > "$build/.ledger.$t"
  printf 'fuzz %-20s %5ss (cpu %5ss)  %10s execs  %6s/s  corpus %5s  %s\n' "$t" "$elapsed" "$cpu" "${execs:-?}" "${rate:-?}" "$corpus" "$result" > "$build/.line.$t"
  [ "$result" = ok ]
}

jobs_max=${FUZZ_JOBS:-1}
pids=()
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_target "$t" &
  pids+=($!)
done
for i in "${!targets[@]}"; do
  wait "${pids[$i]}" || failed=1
  t=${targets[$i]}
  cat "$build/.ledger.$t" >> "$ledger" 2> /dev/null || true  # none when the target was missing
  cat "$build/.line.$t" 2> /dev/null || true
  rm -f "$build/.ledger.$t" "$build/.line.$t" "$build/.times.$t" "$build/.cpu0.$t" "$build/.cpu1.$t"
done
exit $failed
