#!/usr/bin/env python3
"""FSDP scaling on one machine: 2 ranks x 1 thread (FSDP over Gloo on loopback) against
1 process x 2 threads, at the same global batch, model and data. Target: ratio >= 0.9.

Usage: bench/fsdp_scaling.py [--ctitan build/bin/ctitan] [--steps 30] [--dtype float32|bfloat16]
The figure to read is `ratio` = FSDP global tokens/s / single-process tokens/s.
"""
import argparse
import tempfile

import scaling_lib as lib


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        single_tps, fsdp_tps, last = lib.scaling("fsdp_scaling", args.ctitan, tmp, lib.degrees(1, 2), args.steps,
                                                 args.global_batch, args.seq_len, args.dtype)
    print(f"fsdp_scaling: debugmodel seq {args.seq_len}, global batch {args.global_batch}, {args.dtype}, "
          f"{args.steps} steps (first 5 excluded)")
    print(f"  1 process x 2 threads  : {single_tps:9.0f} tok/s")
    print(f"  FSDP 2 ranks x 1 thread: {fsdp_tps:9.0f} tok/s global "
          f"(exposed comm {100 * last.get('comm_exposed_ratio', 0):.1f}% of the step, "
          f"{last.get('comm_bytes_per_step', 0) / 2**20:.1f} MiB per step per rank)")
    print(f"  ratio                  : {fsdp_tps / single_tps:9.2f}x (target >= 0.90)")


if __name__ == "__main__":
    main()
