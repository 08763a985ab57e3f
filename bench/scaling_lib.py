"""Shared pieces of the data-parallel benchmarks: random token data, running ctitan, and
reading metrics.jsonl. Each benchmark measures its baseline in the same run."""
import json
import os
import random
import struct
import subprocess
import sys


def write_random_tokens(path, n_tokens, vocab=2048):
    """Random tokens in the token-file format: throughput and memory do not depend on the data."""
    rng = random.Random(0)
    with open(path, "wb") as f:
        f.write(b"CTTOKS01" + struct.pack("<II", vocab, 0))
        f.write(struct.pack(f"<{n_tokens}I", *(rng.randrange(vocab) for _ in range(n_tokens))))


def run(name, cmd, env):
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.exit(f"{name}: command failed ({result.returncode}): {' '.join(cmd)}\n{result.stdout[-2000:]}")
    return result.stdout


def training_rows(metrics_path, skip_first=0):
    rows = [json.loads(line) for line in open(metrics_path)]
    return [r for r in rows if "tps" in r and r["step"] > skip_first]


def single_env(threads):
    return dict(os.environ, CTITAN_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))


def ranks_env():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("CTITAN_NUM_THREADS", None)
    return env


def launch(ctitan, nproc):
    return [ctitan, "run", "--nproc-per-node", str(nproc), "--master-port", "0"]


def degrees(replicate, shard):
    return ["--parallelism.data_parallel_replicate_degree", str(replicate),
            "--parallelism.data_parallel_shard_degree", str(shard)]


def scaling(name, ctitan, tmp, parallel_args, steps, global_batch, seq_len, dtype):
    """tokens/s of 1 process x 2 threads and of 2 ranks x 1 thread with `parallel_args`, at the
    same global batch. Returns (single_tps, parallel_tps, parallel_last_row)."""
    data = os.path.join(tmp, "random.bin")
    write_random_tokens(data, (steps + 2) * global_batch * (seq_len + 1))
    common = ["train", "--model.flavor", "debugmodel", "--training.dataset_path", data,
              "--training.seq_len", str(seq_len), "--training.steps", str(steps),
              "--training.mixed_precision_param", dtype, "--metrics.log_freq", "5",
              "--metrics.peak_flops", "1e12", "--lr_scheduler.warmup_steps", "2"]
    single_dir = os.path.join(tmp, "single")
    run(name, [ctitan] + common + ["--job.dump_folder", single_dir, "--training.local_batch_size",
                                   str(global_batch)], single_env(2))
    rows = training_rows(os.path.join(single_dir, "metrics.jsonl"), 5)
    single_tps = sum(r["tps"] for r in rows) / len(rows)

    parallel_dir = os.path.join(tmp, "parallel")
    run(name, launch(ctitan, 2) + common + ["--job.dump_folder", parallel_dir, "--training.local_batch_size",
                                            str(global_batch // 2)] + parallel_args, ranks_env())
    rows = training_rows(os.path.join(parallel_dir, "metrics.jsonl"), 5)
    # metrics.jsonl reports rank 0's tokens/s; both ranks run equal shares.
    parallel_tps = 2 * sum(r["tps"] for r in rows) / len(rows)
    return single_tps, parallel_tps, rows[-1]


def scaling_main(name, label, parallel_args, default_dtype, target=None):
    """The command line of a scaling benchmark: parses the options, runs scaling(), prints the table."""
    import argparse
    import tempfile
    parser = argparse.ArgumentParser(description=f"{label} 2 ranks x 1 thread against 1 process x 2 threads")
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dtype", default=default_dtype)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        single_tps, parallel_tps, last = scaling(name, args.ctitan, tmp, parallel_args, args.steps,
                                                 args.global_batch, args.seq_len, args.dtype)
    print(f"{name}: debugmodel seq {args.seq_len}, global batch {args.global_batch}, {args.dtype}, "
          f"{args.steps} steps (first 5 excluded)")
    print(f"  1 process x 2 threads    : {single_tps:9.0f} tok/s")
    print(f"  {label:4s} 2 ranks x 1 thread: {parallel_tps:9.0f} tok/s global "
          f"(exposed comm {100 * last.get('comm_exposed_ratio', 0):.1f}% of the step, "
          f"{last.get('comm_bytes_per_step', 0) / 2**20:.1f} MiB per step per rank)")
    goal = f" (target >= {target:.2f})" if target else ""
    print(f"  ratio                    : {parallel_tps / single_tps:9.2f}x{goal}")
