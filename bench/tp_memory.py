#!/usr/bin/env python3
"""Per-rank memory of tensor parallelism, alone and with FSDP, under each activation-checkpointing
mode. Every row trains on the same global batch; rank 0's figures are shown (ranks hold equal
shares up to the replicated norms and FSDP's padding). Two models: the debug model at its usual
size, and the same model on longer, more sequences, so that activations dominate the peak.

Layouts (a TP group's ranks all train the same sequences, so TP(2) keeps the local batch):
  1 process       1 process x 2 threads, local batch B
  TP(2)           2 ranks x 1 thread, tensor_parallel_degree 2, local batch B
  FSDP(2)         2 ranks x 1 thread, data_parallel_shard_degree 2, local batch B/2
  FSDP(2)xTP(2)   4 ranks x 1 thread (2 per core), mesh [1, 2, 2], local batch B/2
each with activation_checkpoint.mode none, selective (every 2nd block), op (operator-level selective:
every block keeps its matmul, attention and TP reduce-scatter outputs) and full.

From ctitan's metrics.jsonl (bench/scaling_lib.py memory_row): parameter, gradient and optimizer
bytes from the tensors' storage; peak live bytes from the counting CPU allocator; payload bytes of
every collective per step (dp and tp groups). "act" is peak minus model state: it holds the
activations and whatever else is live at the peak.

"fsdp" is measured at the moment of the peak, not estimated: FSDP tags what it holds only for a
while (gathered parameters, their gradients until copied for reduction, all-gather and
reduce-scatter buffers, each held until its wait; metrics/memory_tracker.h), and the
counting allocator copies the tagged counters whenever it records a new peak; metrics.jsonl
reports them (memory_peak_fsdp_{params,grads,comm}_bytes) beside memory_peak_bytes. "activ" = peak - model state - fsdp: the activations at the peak (the autograd graph's
saved tensors and backward's temporaries). TP's collectives run inside the call, and what they
gather is saved for backward: activations too. Model state is the end of the step's, so
gradients not yet produced at the peak are subtracted as well: "activ" is a lower bound.

Targets: TP(2) model state <= 0.55x 1 process's; AC full cuts each layout's activations at the
peak ("activ") by >= 60% against AC none. Activation checkpointing cannot cut FSDP's gathered
parameters or communication buffers, so "act", which counts them, is printed beside it without a
verdict. A missed target prints FAIL; the script still exits 0.
Usage: bench/tp_memory.py [--ctitan build/bin/ctitan] [--dtype float32|bfloat16] [--steps 4]
                          [--seq-len 256 --global-batch 4] [--large-seq-len 512 --large-global-batch 8]
                          [--sizes small,large] [--layouts 1,tp,fsdp,fsdp-tp]
"""
import argparse
import os
import sys
import tempfile

import scaling_lib as lib

MIB = 2 ** 20
STATE_TARGET = 0.55  # TP(2) model state / 1 process: half, plus the replicated norms
AC_CUT_TARGET = 0.60  # AC full removes at least this share of AC none's activation part

AC_MODES = [("none", ["--activation_checkpoint.mode", "none"]),
            ("selective", ["--activation_checkpoint.mode", "selective",
                           "--activation_checkpoint.selective_ac_option", "2"]),
            ("op", ["--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "op"]),
            ("full", ["--activation_checkpoint.mode", "full"])]


LAYOUT_KEYS = {"1": "1 process", "tp": "TP(2)", "fsdp": "FSDP(2)", "fsdp-tp": "FSDP(2)xTP(2)"}


def layouts(global_batch, keys=tuple(LAYOUT_KEYS)):
    """(name, nproc, ctitan arguments): the same global batch in every layout."""
    def batch(n):
        return ["--training.local_batch_size", str(n)]
    every = [("1 process", 1, batch(global_batch)),
             ("TP(2)", 2, lib.degrees(1, 1, tp=2) + batch(global_batch)),
             ("FSDP(2)", 2, lib.degrees(1, 2) + batch(global_batch // 2)),
             ("FSDP(2)xTP(2)", 4, lib.degrees(1, 2, tp=2) + batch(global_batch // 2))]
    names = {LAYOUT_KEYS[k] for k in keys}
    return [layout for layout in every if layout[0] in names]


def verdict(ok):
    return "PASS" if ok else "FAIL"


def measure_model(ctitan, tmp, title, seq_len, global_batch, dtype, steps, layout_keys):
    """The chosen layouts under every AC mode. Returns {(layout, mode): memory_row plus "fsdp",
    the FSDP-tagged bytes at the peak}."""
    data = os.path.join(tmp, f"random_{seq_len}_{global_batch}.bin")
    lib.write_random_tokens(data, (steps + 2) * global_batch * (seq_len + 1))
    rows = {}
    for name, nproc, args in layouts(global_batch, layout_keys):
        for mode, ac_args in AC_MODES:
            r = lib.memory_row("tp_memory", ctitan, tmp, data, f"{title} {name} {mode}", nproc, args + ac_args,
                               dtype, seq_len, steps)
            rows[(name, mode)] = r
            print(f"tp_memory: {title}, {name}, AC {mode}: {r['step_s']:.2f} s/step", file=sys.stderr, flush=True)
    return rows


def activations(r):
    """Peak minus model state minus FSDP's bytes at the peak (see the module docstring)."""
    return r["peak"] - r["state"] - sum(r["fsdp"].values())


def report(title, rows, seq_len, global_batch, dtype, steps):
    """Prints one model's table and its targets. Returns the verdicts, as booleans."""
    print(f"{title}: seq {seq_len}, global batch {global_batch}, {dtype}, {steps} steps (peak over steps 2..); "
          f"MiB per rank (rank 0)")
    print(f"  {'layout':14s} {'AC':9s} {'params':>7s} {'grads':>7s} {'optim':>7s} {'state':>7s} {'peak':>8s} "
          f"{'act':>8s} {'act %':>6s} {'fsdp':>6s} {'activ':>8s} {'comm/step':>10s} {'s/step':>7s}")
    for (name, mode), r in rows.items():
        act = r["peak"] - r["state"]
        print(f"  {name:14s} {mode:9s} {r['params'] / MIB:7.1f} {r['grads'] / MIB:7.1f} "
              f"{r['optimizer'] / MIB:7.1f} {r['state'] / MIB:7.1f} {r['peak'] / MIB:8.1f} {act / MIB:8.1f} "
              f"{100 * act / r['peak']:5.0f}% {sum(r['fsdp'].values()) / MIB:6.1f} {activations(r) / MIB:8.1f} "
              f"{r['comm'] / MIB:10.1f} {r['step_s']:7.2f}")
    names = []
    for name, _ in rows:
        if name not in names:
            names.append(name)
    sharded = [name for name in names if "FSDP" in name]
    if sharded:
        print("  FSDP's bytes at the peak (MiB): gathered parameters + their gradients + communication buffers")
        for name in sharded:
            parts = ", ".join(f"{mode} {rows[(name, mode)]['fsdp']['params'] / MIB:.2f} + "
                              f"{rows[(name, mode)]['fsdp']['grads'] / MIB:.2f} + "
                              f"{rows[(name, mode)]['fsdp']['comm'] / MIB:.2f}" for mode, _ in AC_MODES)
            print(f"    {name:14s} {parts}")

    verdicts = []
    if ("TP(2)", "none") in rows and ("1 process", "none") in rows:
        state = rows[("TP(2)", "none")]["state"] / rows[("1 process", "none")]["state"]
        verdicts.append(state <= STATE_TARGET)
        print(f"  TP(2) / 1 process model state: {state:.3f} (target <= {STATE_TARGET:.2f}) {verdict(verdicts[-1])}")
    print(f"  AC full / AC none, activations at the peak, \"activ\" (target: cut by >= {100 * AC_CUT_TARGET:.0f}%;"
          f" \"act\", which also counts FSDP's buffers, in brackets):")
    for name in names:
        none_act, full_act = activations(rows[(name, "none")]), activations(rows[(name, "full")])
        cut = 1 - full_act / none_act
        old_none = rows[(name, "none")]["peak"] - rows[(name, "none")]["state"]
        old_full = rows[(name, "full")]["peak"] - rows[(name, "full")]["state"]
        verdicts.append(cut >= AC_CUT_TARGET)
        print(f"    {name:14s} {full_act / MIB:8.1f} / {none_act / MIB:8.1f} MiB = {full_act / none_act:.3f} "
              f"(cut {100 * cut:.1f}%) {verdict(verdicts[-1])}   [act: {old_full / MIB:.1f} / {old_none / MIB:.1f} MiB, "
              f"cut {100 * (1 - old_full / old_none):.1f}%]")
    print("  AC op / AC none, activations at the peak (no target; between full and none):")
    for name in names:
        none_act, op_act = activations(rows[(name, "none")]), activations(rows[(name, "op")])
        print(f"    {name:14s} {op_act / MIB:8.1f} / {none_act / MIB:8.1f} MiB = {op_act / none_act:.3f}")
    return verdicts


def main():
    parser = argparse.ArgumentParser(description="TP, FSDP and FSDP x TP per-rank memory under each AC mode")
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256, help="the debug model's row")
    parser.add_argument("--global-batch", type=int, default=4, help="the debug model's row")
    parser.add_argument("--large-seq-len", type=int, default=512, help="the activation-dominated row")
    parser.add_argument("--large-global-batch", type=int, default=8, help="the activation-dominated row")
    parser.add_argument("--sizes", default="small,large",
                        help="comma-separated: small (--seq-len, --global-batch), large (--large-*)")
    parser.add_argument("--layouts", default=",".join(LAYOUT_KEYS),
                        help="comma-separated, of " + ", ".join(f"{k} ({v})" for k, v in LAYOUT_KEYS.items()))
    args = parser.parse_args()
    sizes = [x for x in args.sizes.split(",") if x]
    layout_keys = [x for x in args.layouts.split(",") if x]
    if not sizes or any(x not in ("small", "large") for x in sizes):
        parser.error(f"--sizes takes small and/or large, got '{args.sizes}'")
    if not layout_keys or any(x not in LAYOUT_KEYS for x in layout_keys):
        parser.error(f"--layouts takes {', '.join(LAYOUT_KEYS)}, got '{args.layouts}'")
    if args.steps < 2:
        parser.error("--steps must be >= 2 (step 1 is left out)")
    for flag, gb in [("--global-batch", args.global_batch), ("--large-global-batch", args.large_global_batch)]:
        if gb % 2:
            parser.error(f"{flag} must be even (FSDP(2) trains half of it per rank)")
    for flag, seq in [("--seq-len", args.seq_len), ("--large-seq-len", args.large_seq_len)]:
        if seq % 2:
            parser.error(f"{flag} must be even (sequence parallel splits it over TP(2))")
    lib.check_ctitan("tp_memory", args.ctitan)

    models = [m for size, m in [("small", ("debugmodel", args.seq_len, args.global_batch)),
                                ("large", ("debugmodel, activations dominate", args.large_seq_len,
                                           args.large_global_batch))] if size in sizes]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for title, seq_len, gb in models:
            results.append(measure_model(args.ctitan, tmp, title, seq_len, gb, args.dtype, args.steps, layout_keys))

    verdicts = []
    for (title, seq_len, gb), rows in zip(models, results):
        verdicts += report(title, rows, seq_len, gb, args.dtype, args.steps)
    print(f"tp_memory: {sum(verdicts)} of {len(verdicts)} targets met")


if __name__ == "__main__":
    main()
