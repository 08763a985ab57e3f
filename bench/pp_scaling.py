#!/usr/bin/env python3
"""Pipeline-parallel scaling on one machine: PP(2) (2 ranks x 1 thread) and PP(4) (4 ranks x 1
thread) with GPipe and 1F1B at several microbatch counts, against 1 process x 2 threads at the
same global batch, model and data (fp32 debug model; Gloo send/recv on loopback).

Printed per layout:
- tokens/s of the whole pipeline (rank 0's per-device figure x pp, as ctitan divides by pp) and
  its ratio to one process;
- the measured bubble: rank 0's idle share of its schedule runs (pp_bubble: 1 - forward/backward
  compute / run time) and the largest over the ranks (pp_bubble_max), against the theoretical
  (p-1)/(m+p-1);
- per stage (pp rank; two stages each under Interleaved1F1B): the peak live bytes above the
  rank's model state (parameters, gradients, optimizer state), from metrics.jsonl's
  pp_memory_peak_bytes - pp_model_state_bytes: the activations the schedule keeps in flight, plus
  the send/receive buffers and temporaries live at the peak. GPipe's stage s holds all m
  microbatches' activations, 1F1B's at most min(m, p - s), so for each 1F1B row the ratio of its
  stage's figure to GPipe's at the same p and m is printed against min(m, p - s) / m.

PP(4) on this 2-core machine runs 4 single-threaded ranks on 2 cores: a rank time-sliced off its
core idles too, so its bubble column is not the schedule's alone (said next to those rows).
Then Interleaved1F1B at PP(2), and the 3-D layout PP(2) x FSDP(2) x TP(2) on 8 ranks against one
process over 10 fp32 steps (too slow for the test suite): its largest relative loss and grad-norm
differences. There is no PyTorch baseline here (torch_dp_worker.py has no pipeline).

Usage: bench/pp_scaling.py [--ctitan build/bin/ctitan] [--steps 20] [--global-batch 8] [--seq-len 256]
"""
import argparse
import json
import os
import tempfile

import scaling_lib as lib


def train(ctitan, tmp, name, nproc, data, args, common):
    folder = os.path.join(tmp, name)
    cmd = ([ctitan] if nproc == 1 else lib.launch(ctitan, nproc)) + common + ["--job.dump_folder", folder] + args
    lib.run("pp_scaling", cmd, lib.single_env(2) if nproc == 1 else lib.ranks_env())
    return lib.training_rows(os.path.join(folder, "metrics.jsonl"), skip_first=3)


def mean(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description="PP(2)/PP(4) GPipe and 1F1B against 1 process x 2 threads")
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args()
    if args.steps <= 3:
        parser.error("--steps must exceed 3 (the first 3 steps are not timed)")
    lib.check_ctitan("pp_scaling", args.ctitan)

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "random.bin")
        lib.write_random_tokens(data, (args.steps + 2) * args.global_batch * (args.seq_len + 1))
        common = ["train", "--model.flavor", "debugmodel", "--training.dataset_path", data,
                  "--training.seq_len", str(args.seq_len), "--training.steps", str(args.steps),
                  "--training.mixed_precision_param", "float32", "--metrics.log_freq", "1",
                  "--metrics.peak_flops", "1e12", "--lr_scheduler.warmup_steps", "2",
                  "--training.local_batch_size", str(args.global_batch)]
        single = train(args.ctitan, tmp, "single", 1, data, [], common)
        single_tps = mean(single, "tps")
        print(f"pp_scaling: debugmodel seq {args.seq_len}, global batch {args.global_batch}, float32, "
              f"{args.steps} steps (first 3 excluded)")
        print(f"  {'1 process x 2 threads':34s} {single_tps:8.0f} tok/s   peak {mean(single, 'memory_peak_bytes') / 2**20:7.1f} MiB")
        gpipe_activations = {}  # (pp, m) -> per stage MiB above model state

        def activations(rows):
            """Per pp rank: mean MiB of peak live bytes above the model state."""
            per_rank = zip(*[[(peak - state) / 2**20 for peak, state in
                              zip(r["pp_memory_peak_bytes"], r["pp_model_state_bytes"])] for r in rows])
            return [sum(v) / len(v) for v in per_rank]

        def report(name, pp, rows, note=""):
            tps = pp * mean(rows, "tps")
            act = activations(rows)
            print(f"  {name:34s} {tps:8.0f} tok/s {tps / single_tps:5.2f}x   bubble rank 0 "
                  f"{100 * mean(rows, 'pp_bubble'):5.1f}%, max {100 * mean(rows, 'pp_bubble_max'):5.1f}%, "
                  f"theory {100 * rows[-1]['pp_bubble_theory']:5.1f}%   above model state per stage "
                  f"{' '.join(f'{a:6.1f}' for a in act)} MiB{note}")
            return act

        for pp in (2, 4):
            for schedule in ("GPipe", "1F1B"):
                for m in (pp, 2 * pp, 4 * pp):
                    if args.global_batch % m:
                        continue
                    name = f"PP({pp}) {schedule} m={m}"
                    rows = train(args.ctitan, tmp, name.replace(" ", "_").replace("(", "").replace(")", "").replace("=", ""),
                                 pp, data,
                                 ["--parallelism.pipeline_parallel_degree", str(pp),
                                  "--parallelism.pipeline_parallel_schedule", schedule,
                                  "--parallelism.pipeline_parallel_microbatch_size", str(args.global_batch // m)],
                                 common)
                    act = report(name, pp, rows, "  (4 ranks on 2 cores: time-sliced)" if pp > 2 else "")
                    if schedule == "GPipe":
                        gpipe_activations[(pp, m)] = act
                    elif (pp, m) in gpipe_activations:
                        ratios = [a / g for a, g in zip(act, gpipe_activations[(pp, m)])]
                        theory = [min(m, pp - s) / m for s in range(pp)]
                        print(f"  {'':34s} 1F1B / GPipe activations per stage "
                              f"{' '.join(f'{r:4.2f}' for r in ratios)}  (min(m, p - s) / m: "
                              f"{' '.join(f'{t:4.2f}' for t in theory)})")
        for m in (4, 8):
            if args.global_batch % m:
                continue
            rows = train(args.ctitan, tmp, f"interleaved{m}", 2, data,
                         ["--parallelism.pipeline_parallel_degree", "2",
                          "--parallelism.pipeline_parallel_schedule", "Interleaved1F1B",
                          "--parallelism.pipeline_parallel_microbatch_size", str(args.global_batch // m)], common)
            report(f"PP(2) Interleaved1F1B m={m}", 2, rows, "  (2 stages per rank)")

        # Parity of the 3-D layout: 8 ranks, each stage sharded over FSDP(2) and sliced over TP(2).
        short = common[:common.index("--training.local_batch_size")]
        short[short.index("--training.steps") + 1] = "10"
        short[short.index("--training.seq_len") + 1] = "64"

        def losses(name):
            return [r for r in map(json.loads, open(os.path.join(tmp, name, "metrics.jsonl"))) if "loss" in r]

        train(args.ctitan, tmp, "one3d", 1, data, ["--training.local_batch_size", "4"], short)
        train(args.ctitan, tmp, "pp_fsdp_tp", 8, data,
              ["--parallelism.pipeline_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "2",
               "--parallelism.tensor_parallel_degree", "2", "--training.local_batch_size", "2"], short)
        one, eight = losses("one3d"), losses("pp_fsdp_tp")
        loss = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(one, eight))
        norm = max(abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"] for a, b in zip(one, eight))
        print(f"  PP(2)xFSDP(2)xTP(2), 8 ranks, vs 1 process over {len(eight)} fp32 steps (seq 64, global batch 4): "
              f"max relative difference loss {loss:.2e}, grad_norm {norm:.2e}")


if __name__ == "__main__":
    main()
