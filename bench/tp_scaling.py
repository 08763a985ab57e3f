#!/usr/bin/env python3
"""Tensor-parallel scaling on one machine: TP(2), 2 ranks x 1 thread (Megatron-style with sequence
parallel and loss parallel, Gloo on loopback) against 1 process x 2 threads, at the same global
batch, model and data. Both TP ranks train the whole global batch, each with half of every
weight; ctitan's tokens/s under TP is per device (the tp group's tokens / tp, as torchtitan), so
the global figure is 2x rank 0's. No PyTorch baseline: torch_dp_worker.py has no TP.

Then the same with async TP (parallelism.enable_async_tensor_parallel: each sequence all-gather
and reduce-scatter fused with its matmuls and micro-pipelined on sequence chunks), against the
same 1-process layout run again beside it, and async / sync TP.

Printed: each layout's tokens/s, TP(2) / 1 process, and TP(2)'s communication: the trainer's
exposed share (comm_exposed_ratio), the share of the step rank 0 was blocked in any collective
(scaling_lib.collective_share: synchronous TP's collectives block for their whole length, async
TP's only for what compute did not hide) and the payload bytes per step.

Usage: bench/tp_scaling.py [--ctitan build/bin/ctitan] [--steps 30] [--dtype float32|bfloat16]
                           [--global-batch 8] [--seq-len 256]
"""
import argparse
import tempfile

import scaling_lib as lib


def main():
    parser = argparse.ArgumentParser(description="TP(2) 2 ranks x 1 thread against 1 process x 2 threads")
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args()
    if args.steps <= 5:
        parser.error("--steps must exceed 5 (the first 5 steps are not timed)")
    if args.seq_len % 2:
        parser.error("--seq-len must be even (sequence parallel splits it over TP(2))")
    lib.check_ctitan("tp_scaling", args.ctitan)

    runs = {}
    for label, extra in (("TP(2)", []), ("async TP(2)", ["--parallelism.enable_async_tensor_parallel", "true"])):
        with tempfile.TemporaryDirectory() as tmp:
            runs[label] = lib.scaling("tp_scaling", args.ctitan, tmp, lib.degrees(1, 1, tp=2) + extra, args.steps,
                                      args.global_batch, args.seq_len, args.dtype,
                                      parallel_local_batch=args.global_batch)

    print(f"tp_scaling: debugmodel seq {args.seq_len}, global batch {args.global_batch}, {args.dtype}, "
          f"{args.steps} steps (first 5 excluded)")
    for label, (single, tp, last) in runs.items():
        print(f"  {'1 process x 2 threads':28s} {single:8.0f} tok/s")
        print(f"  {label + ' 2 ranks x 1 thread':28s} {tp:8.0f} tok/s (2 x rank 0's per-device {tp / 2:.0f})")
        print(f"  {label + ' / 1 process':28s} {tp / single:8.2f}x")
        print(f"  ctitan {label}: blocked in collectives {100 * lib.collective_share(last):.1f}% of the step "
              f"(trainer's comm_exposed_ratio {100 * last.get('comm_exposed_ratio', 0):.1f}%), "
              f"{last.get('comm_bytes_per_step', 0) / 2**20:.1f} MiB per step per rank")
    (single_sync, sync, _), (single_async, fused, _) = runs["TP(2)"], runs["async TP(2)"]
    print(f"  {'async / sync TP(2)':28s} {(fused / single_async) / (sync / single_sync):8.2f}x "
          f"(each against its own 1-process run; raw {fused / sync:.2f}x)")


if __name__ == "__main__":
    main()
