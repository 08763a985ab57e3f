#!/usr/bin/env python3
"""Per-rank memory of data-parallel layouts, ctitan against PyTorch 2.x in the same run. Every row
trains the debug model on the same global batch; rank 0's figures are shown (ranks hold equal
shares up to padding).

ctitan, from its own counters: parameter, gradient and optimizer bytes from the tensors' storage,
peak live bytes from the counting CPU allocator, payload bytes of data-parallel collectives per step.
PyTorch (bench/torch_dp_worker.py under torchrun, Gloo): DDP, and FSDP2 fully_shard per block then
root with the same reshard and gradient-sync settings; parameter, gradient and optimizer bytes of
rank 0's local tensors (FSDP2: the DTensors' local shards). PyTorch has no live-tensor counter on
CPU, so both sides are also compared by peak RSS of the largest process of the run (a rank),
measured the same way for both (wait4 on the launcher).

Targets (ctitan): FSDP(2) model state <= 0.55x DDP(2)'s; FSDP(2) peak <= DDP(2) peak.
Usage: bench/fsdp_memory.py [--ctitan build/bin/ctitan] [--python ~/.cache/ctitan/venv/bin/python]
                            [--dtype float32|bfloat16] [--baseline-only]
"""
import argparse
import os
import tempfile

import scaling_lib as lib

MIB = 2 ** 20


def measure_pytorch(python, name, nproc, worker_args, dtype, seq_len, steps):
    common = ["--flavor", "debugmodel", "--seq-len", str(seq_len), "--dtype", dtype, "--steps", str(steps),
              "--skip", "1"]
    # ctitan's threads: 2 for the one process, 1 per rank.
    r = lib.run_pytorch("fsdp_memory", python, nproc, 2 if nproc == 1 else 1, common + worker_args)
    state = r["params_bytes"] + r["grads_bytes"] + r["optimizer_bytes"]
    return {"name": name, "params": r["params_bytes"], "grads": r["grads_bytes"], "optimizer": r["optimizer_bytes"],
            "state": state, "rss": r["peak_rss_tree_bytes"], "rss_after_import": r["rss_after_import_bytes"],
            "optimizer_impl": r["optimizer"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--global-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    lib.add_baseline_args(parser)
    args = parser.parse_args()
    if args.global_batch % 4:
        parser.error("--global-batch must be a multiple of 4 (2 ranks x 2 microbatches)")
    if args.steps < 2:
        parser.error("--steps must be >= 2 (step 1 is left out)")
    if not args.baseline_only:
        lib.check_ctitan("fsdp_memory", args.ctitan)
    torch_version = lib.check_pytorch("fsdp_memory", args.python)
    gb = args.global_batch
    fsdp2 = lib.degrees(1, 2)
    # (name, nproc, ctitan arguments, torch_dp_worker.py arguments): the same layout on both sides.
    layouts = [
        ("1 process", 1, ["--training.local_batch_size", str(gb)],
         ["--parallel", "none", "--local-batch", str(gb)]),
        ("DDP(2)", 2, lib.degrees(2, 1) + ["--training.local_batch_size", str(gb // 2)],
         ["--parallel", "ddp", "--local-batch", str(gb // 2)]),
        ("FSDP(2)", 2, fsdp2 + ["--training.local_batch_size", str(gb // 2)],
         ["--parallel", "fsdp", "--local-batch", str(gb // 2)]),
        ("FSDP(2) reshard=never", 2, fsdp2 + ["--training.local_batch_size", str(gb // 2),
                                              "--parallelism.fsdp_reshard_after_forward", "never"],
         ["--parallel", "fsdp", "--local-batch", str(gb // 2), "--reshard-after-forward", "never"]),
        ("FSDP(2) 2 mb every_microbatch", 2, fsdp2 + ["--training.local_batch_size", str(gb // 4),
                                                     "--training.global_batch_size", str(gb),
                                                     "--parallelism.fsdp_gradient_sync", "every_microbatch"],
         ["--parallel", "fsdp", "--local-batch", str(gb // 4), "--microbatches", "2",
          "--gradient-sync", "every_microbatch"]),
        ("FSDP(2) 2 mb last_microbatch", 2, fsdp2 + ["--training.local_batch_size", str(gb // 4),
                                                    "--training.global_batch_size", str(gb),
                                                    "--parallelism.fsdp_gradient_sync", "last_microbatch"],
         ["--parallel", "fsdp", "--local-batch", str(gb // 4), "--microbatches", "2",
          "--gradient-sync", "last_microbatch"]),
    ]
    ours = {}
    if not args.baseline_only:
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "random.bin")
            lib.write_random_tokens(data, (args.steps + 2) * gb * (args.seq_len + 1))
            for name, nproc, a, _ in layouts:
                ours[name] = lib.memory_row("fsdp_memory", args.ctitan, tmp, data, name, nproc, a,
                                            args.dtype, args.seq_len, args.steps)
    theirs = {name: measure_pytorch(args.python, name, nproc, w, args.dtype, args.seq_len, args.steps)
              for name, nproc, _, w in layouts}

    print(f"fsdp_memory: debugmodel, seq {args.seq_len}, global batch {gb}, {args.dtype}; MiB per rank (rank 0)")
    if ours:
        print("ctitan (own counters; peak = live tensor bytes):")
        print(f"  {'layout':32s} {'params':>8s} {'grads':>8s} {'optim':>8s} {'state':>8s} {'peak':>8s} "
              f"{'comm/step':>10s}")
        for r in ours.values():
            print(f"  {r['name']:32s} {r['params'] / MIB:8.1f} {r['grads'] / MIB:8.1f} {r['optimizer'] / MIB:8.1f} "
                  f"{r['state'] / MIB:8.1f} {r['peak'] / MIB:8.1f} {r['comm'] / MIB:10.1f}")
        ddp, fsdp = ours["DDP(2)"], ours["FSDP(2)"]
        print(f"  FSDP(2) / DDP(2) model state: {fsdp['state'] / ddp['state']:.3f} (target <= 0.55)")
        print(f"  FSDP(2) / DDP(2) peak       : {fsdp['peak'] / ddp['peak']:.3f} (target <= 1.00)")

    any_torch = next(iter(theirs.values()))
    print(f"PyTorch {torch_version} ({args.python}): DDP / FSDP2 on Gloo, {any_torch['optimizer_impl']}; "
          f"peak RSS of the largest process (a rank), {any_torch['rss_after_import'] / MIB:.0f} MiB of it "
          f"already after `import torch`:")
    print(f"  {'layout':32s} {'params':>8s} {'grads':>8s} {'optim':>8s} {'state':>8s} {'peak RSS':>9s}")
    for r in theirs.values():
        print(f"  {r['name']:32s} {r['params'] / MIB:8.1f} {r['grads'] / MIB:8.1f} {r['optimizer'] / MIB:8.1f} "
              f"{r['state'] / MIB:8.1f} {r['rss'] / MIB:9.1f}")
    ddp, fsdp = theirs["DDP(2)"], theirs["FSDP(2)"]
    print(f"  FSDP(2) / DDP(2) model state: {fsdp['state'] / ddp['state']:.3f}")

    if ours:
        print("ctitan / PyTorch, same layout:")
        print(f"  {'layout':32s} {'state':>8s} {'peak RSS':>9s}   (ctitan peak RSS MiB, PyTorch peak RSS MiB)")
        for name, r in ours.items():
            t = theirs[name]
            print(f"  {name:32s} {r['state'] / t['state']:7.3f}x {r['rss'] / t['rss']:8.3f}x   "
                  f"({r['rss'] / MIB:.0f}, {t['rss'] / MIB:.0f})")


if __name__ == "__main__":
    main()
