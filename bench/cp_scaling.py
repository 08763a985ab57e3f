#!/usr/bin/env python3
"""Context parallelism: per-rank memory and throughput against sequence length, CP(1), CP(2), CP(4).

Every row trains the same model on one sequence per step (global batch 1) of length S; CP(n) runs
n ranks x 1 thread, each holding S / n tokens of the sequence (context_parallel_degree n; FSDP over
the n ranks, as torchtitan's dp_shard_cp). CP(1) is one process x 2 threads. Rank 0's figures
from ctitan's metrics.jsonl (bench/scaling_lib.py memory_row): model state (parameters, gradients,
optimizer), the peak live bytes of the counting allocator over steps 2.., FSDP's tagged bytes at
the peak, and the mean step time. "activ" = peak - state - FSDP's bytes: the activations at the
peak (see bench/tp_memory.py for why this is a lower bound).

The model: the debug model's layers at a width that keeps a 2-core machine's step time bounded at
long sequences (--model.dim 128, 2 layers, 4 heads; attention's cost grows as S^2).

Each CP(n > 1) row runs with both key rotations (context_parallel_rotate_method): allgather
(torchtitan's default; the targets read these rows) and alltoall (the ring), whose step-time ratio
is printed.

Targets (issue #32): activations per rank at CP(2) <= 0.55x CP(1)'s at every length, and the
sequence that fits a fixed per-rank memory budget grows about linearly with the degree: CP(n) on
an n x longer sequence peaks within 5% of CP(1)'s peak (the budget) on the shorter one, for every
pair of tested lengths S and n x S. A missed target prints FAIL; the script still exits 0.
Usage: bench/cp_scaling.py [--ctitan build/bin/ctitan] [--seq-lens 4096,8192,16384,32768]
                           [--degrees 1,2,4] [--steps 3] [--dtype float32|bfloat16]
                           [--rotations allgather,alltoall]
"""
import argparse
import os
import sys
import tempfile

import scaling_lib as lib

MIB = 2 ** 20
ACTIVATION_TARGET = 0.55  # CP(2) / CP(1) activations per rank: half, plus the ring's buffers
BUDGET_TARGET = 1.05  # CP(n) at n x S against CP(1) at S: the same memory, within 5%
MODEL = ["--model.dim", "128", "--model.n_layers", "2", "--model.n_heads", "4", "--model.vocab_size", "2048"]


def layout(degree, rotation):
    """(nproc, ctitan arguments) for CP(degree) on one sequence per step."""
    args = ["--training.local_batch_size", "1"] + MODEL
    if degree == 1:
        return 1, args
    return degree, lib.degrees(1, 1) + ["--parallelism.context_parallel_degree", str(degree),
                                        "--parallelism.context_parallel_rotate_method", rotation] + args


def activations(r):
    return r["peak"] - r["state"] - sum(r["fsdp"].values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--seq-lens", default="4096,8192,16384,32768")
    parser.add_argument("--degrees", default="1,2,4")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--rotations", default="allgather,alltoall")
    args = parser.parse_args()
    rotations = args.rotations.split(",")
    lib.check_ctitan("cp_scaling", args.ctitan)
    seq_lens = [int(s) for s in args.seq_lens.split(",")]
    degrees = [int(d) for d in args.degrees.split(",")]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seq_len in seq_lens:
            data = os.path.join(tmp, f"random_{seq_len}.bin")
            lib.write_random_tokens(data, (args.steps + 2) * (seq_len + 1))
            for degree in degrees:
                for rotation in rotations if degree > 1 else rotations[:1]:
                    nproc, cp_args = layout(degree, rotation)
                    name = f"CP({degree}) {rotation} seq {seq_len}"
                    r = lib.memory_row("cp_scaling", args.ctitan, tmp, data, name, nproc, cp_args, args.dtype,
                                       seq_len, args.steps)
                    # The first rotation's rows are the table's; the others' step times are compared.
                    rows[(seq_len, degree) if rotation == rotations[0] else (seq_len, degree, rotation)] = r
                    print(f"cp_scaling: {name}: {r['step_s']:.2f} s/step", file=sys.stderr, flush=True)

    print(f"cp_scaling: one sequence per step, {args.dtype}, {args.steps} steps (peak over steps 2..); "
          f"model {' '.join(MODEL)}; MiB per rank (rank 0); CP rows rotate by {rotations[0]}")
    print(f"  {'seq':>6s} {'layout':7s} {'state':>7s} {'peak':>8s} {'fsdp':>7s} {'activ':>8s} {'activ/CP1':>9s} "
          f"{'s/step':>7s} {'tokens/s':>9s} {'comm/step':>10s}")
    verdicts = []
    for seq_len in seq_lens:
        base = rows.get((seq_len, 1))
        for degree in degrees:
            r = rows[(seq_len, degree)]
            ratio = activations(r) / activations(base) if base else float("nan")
            print(f"  {seq_len:6d} {'CP(%d)' % degree:7s} {r['state'] / MIB:7.1f} {r['peak'] / MIB:8.1f} "
                  f"{sum(r['fsdp'].values()) / MIB:7.1f} {activations(r) / MIB:8.1f} {ratio:9.3f} {r['step_s']:7.2f} "
                  f"{seq_len / r['step_s']:9.0f} {r['comm'] / MIB:10.1f}")
        for degree in degrees:
            for rotation in rotations[1:]:
                other = rows.get((seq_len, degree, rotation))
                if other:
                    print(f"  {seq_len:6d} CP({degree}) {rotation}: {other['step_s']:.2f} s/step, "
                          f"{other['step_s'] / rows[(seq_len, degree)]['step_s']:.3f}x {rotations[0]}'s; "
                          f"activ {activations(other) / MIB:.1f} MiB")
        if base and (seq_len, 2) in rows:
            ratio = activations(rows[(seq_len, 2)]) / activations(base)
            verdicts.append(ratio <= ACTIVATION_TARGET)
            print(f"  seq {seq_len}: CP(2) / CP(1) activations {ratio:.3f} (target <= {ACTIVATION_TARGET}) "
                  f"{'PASS' if verdicts[-1] else 'FAIL'}")
    if 1 in degrees:
        print(f"  the same budget, n x the sequence: peak of CP(n) at n x S / peak of CP(1) at S "
              f"(target <= {BUDGET_TARGET})")
        for degree in degrees:
            for seq_len in seq_lens:
                if degree == 1 or (degree * seq_len, degree) not in rows:
                    continue
                ratio = rows[(degree * seq_len, degree)]["peak"] / rows[(seq_len, 1)]["peak"]
                verdicts.append(ratio <= BUDGET_TARGET)
                print(f"    CP({degree}) at {degree * seq_len} / CP(1) at {seq_len}: "
                      f"{rows[(degree * seq_len, degree)]['peak'] / MIB:.1f} / {rows[(seq_len, 1)]['peak'] / MIB:.1f} MiB"
                      f" = {ratio:.3f} {'PASS' if verdicts[-1] else 'FAIL'}")
    print(f"cp_scaling: {sum(verdicts)} of {len(verdicts)} targets met")


if __name__ == "__main__":
    main()
