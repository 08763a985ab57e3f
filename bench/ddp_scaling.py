#!/usr/bin/env python3
"""DDP scaling on one machine: 2 ranks x 1 thread (DDP over Gloo on loopback) against
1 process x 2 threads, at the same global batch, model and data. Prints the throughput ratio.

Usage: bench/ddp_scaling.py [--ctitan build/bin/ctitan] [--steps 30] [--dtype float32|bfloat16]
The figure to read is `ratio` = DDP global tokens/s / single-process tokens/s.
"""
import argparse
import tempfile

import scaling_lib as lib


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        single_tps, ddp_tps, last = lib.scaling("ddp_scaling", args.ctitan, tmp, lib.degrees(2, 1), args.steps,
                                                args.global_batch, args.seq_len, args.dtype)
    print(f"ddp_scaling: debugmodel seq {args.seq_len}, global batch {args.global_batch}, {args.dtype}, "
          f"{args.steps} steps (first 5 excluded)")
    print(f"  1 process x 2 threads : {single_tps:9.0f} tok/s")
    print(f"  DDP 2 ranks x 1 thread: {ddp_tps:9.0f} tok/s global "
          f"(exposed comm {100 * last.get('comm_exposed_ratio', 0):.1f}% of the step)")
    print(f"  ratio                 : {ddp_tps / single_tps:9.2f}x")


if __name__ == "__main__":
    main()
