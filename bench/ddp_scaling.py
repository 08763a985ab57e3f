#!/usr/bin/env python3
"""DDP scaling on one machine: 2 ranks x 1 thread (DDP over Gloo on loopback) against
1 process x 2 threads, at the same global batch, model and data. Prints the throughput ratio.

Usage: bench/ddp_scaling.py [--ctitan build/bin/ctitan] [--steps 30] [--dtype float32|bfloat16]
The figure to read is `ratio` = DDP global tokens/s / single-process tokens/s.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(cmd, env):
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.exit(f"ddp_scaling: command failed ({result.returncode}): {' '.join(cmd)}\n{result.stdout[-2000:]}")


def steady_tps(metrics_path, skip_first):
    rows = [json.loads(line) for line in open(metrics_path)]
    rows = [r for r in rows if "tps" in r and r["step"] > skip_first]
    return sum(r["tps"] for r in rows) / len(rows), rows[-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "random.bin")
        # Random tokens through the token-file format: throughput does not depend on the data.
        with open(data, "wb") as f:
            import random
            import struct
            rng = random.Random(0)
            n = (args.steps + 2) * args.global_batch * (args.seq_len + 1)
            f.write(b"CTTOKS01" + struct.pack("<II", 2048, 0))
            f.write(struct.pack(f"<{n}I", *(rng.randrange(2048) for _ in range(n))))
        common = ["train", "--model.flavor", "debugmodel", "--training.dataset_path", data,
                  "--training.seq_len", str(args.seq_len), "--training.steps", str(args.steps),
                  "--training.mixed_precision_param", args.dtype, "--metrics.log_freq", "5",
                  "--metrics.peak_flops", "1e12", "--lr_scheduler.warmup_steps", "2"]

        single_dir = os.path.join(tmp, "single")
        env = dict(os.environ, CTITAN_NUM_THREADS="2", OMP_NUM_THREADS="2")
        run([args.ctitan] + common + ["--job.dump_folder", single_dir,
                                      "--training.local_batch_size", str(args.global_batch)], env)
        single_tps, single_last = steady_tps(os.path.join(single_dir, "metrics.jsonl"), 5)

        ddp_dir = os.path.join(tmp, "ddp")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("CTITAN_NUM_THREADS", None)
        run([args.ctitan, "run", "--nproc-per-node", "2", "--master-port", "0"] + common +
            ["--job.dump_folder", ddp_dir, "--training.local_batch_size", str(args.global_batch // 2),
             "--parallelism.data_parallel_replicate_degree", "2",
             "--parallelism.data_parallel_shard_degree", "1"], env)
        rank_tps, ddp_last = steady_tps(os.path.join(ddp_dir, "metrics.jsonl"), 5)
        ddp_tps = 2 * rank_tps  # metrics.jsonl reports rank 0's tokens/s; both ranks run equal shares

    print(f"ddp_scaling: debugmodel seq {args.seq_len}, global batch {args.global_batch}, {args.dtype}, "
          f"{args.steps} steps (first 5 excluded)")
    print(f"  1 process x 2 threads : {single_tps:9.0f} tok/s")
    print(f"  DDP 2 ranks x 1 thread: {ddp_tps:9.0f} tok/s global "
          f"(exposed comm {100 * ddp_last.get('comm_exposed_ratio', 0):.1f}% of the step)")
    print(f"  ratio                 : {ddp_tps / single_tps:9.2f}x")


if __name__ == "__main__":
    main()
