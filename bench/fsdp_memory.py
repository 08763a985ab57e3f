#!/usr/bin/env python3
"""Per-rank memory of data-parallel layouts, from ctitan's own counters: parameter, gradient and
optimizer bytes from the tensors' storage, peak live bytes from the counting CPU allocator, and
payload bytes of data-parallel collectives per step. Every row trains the debug model on the same
global batch; rank 0's figures are shown (ranks hold equal shares up to padding).

Targets: FSDP(2) model state <= 0.55x DDP(2)'s; FSDP(2) peak <= DDP(2) peak.
Usage: bench/fsdp_memory.py [--ctitan build/bin/ctitan] [--dtype float32|bfloat16]
"""
import argparse
import os
import tempfile

import scaling_lib as lib

MIB = 2 ** 20


def measure(ctitan, tmp, data, name, nproc, args, dtype, seq_len, steps):
    folder = os.path.join(tmp, name.replace(" ", "_").replace("(", "").replace(")", "").replace("=", "_"))
    cmd = ([ctitan] if nproc == 1 else lib.launch(ctitan, nproc)) + [
        "train", "--model.flavor", "debugmodel", "--training.dataset_path", data, "--training.seq_len", str(seq_len),
        "--training.steps", str(steps), "--training.mixed_precision_param", dtype, "--metrics.log_freq", "1",
        "--metrics.peak_flops", "1e12", "--lr_scheduler.warmup_steps", "2", "--job.dump_folder", folder] + args
    lib.run("fsdp_memory", cmd, lib.single_env(2) if nproc == 1 else lib.ranks_env())
    rows = lib.training_rows(os.path.join(folder, "metrics.jsonl"), skip_first=1)
    last = rows[-1]
    state = last["memory_params_bytes"] + last["memory_grads_bytes"] + last["memory_optimizer_bytes"]
    return {"name": name, "params": last["memory_params_bytes"], "grads": last["memory_grads_bytes"],
            "optimizer": last["memory_optimizer_bytes"], "state": state,
            "peak": max(r["memory_peak_bytes"] for r in rows), "comm": last["comm_bytes_per_step"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--global-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    gb = args.global_batch
    fsdp2 = lib.degrees(1, 2)
    layouts = [
        ("1 process", 1, ["--training.local_batch_size", str(gb)]),
        ("DDP(2)", 2, lib.degrees(2, 1) + ["--training.local_batch_size", str(gb // 2)]),
        ("FSDP(2)", 2, fsdp2 + ["--training.local_batch_size", str(gb // 2)]),
        ("FSDP(2) reshard=never", 2, fsdp2 + ["--training.local_batch_size", str(gb // 2),
                                              "--parallelism.fsdp_reshard_after_forward", "never"]),
        ("FSDP(2) 2 mb every_microbatch", 2, fsdp2 + ["--training.local_batch_size", str(gb // 4),
                                                     "--training.global_batch_size", str(gb),
                                                     "--parallelism.fsdp_gradient_sync", "every_microbatch"]),
        ("FSDP(2) 2 mb last_microbatch", 2, fsdp2 + ["--training.local_batch_size", str(gb // 4),
                                                    "--training.global_batch_size", str(gb),
                                                    "--parallelism.fsdp_gradient_sync", "last_microbatch"]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "random.bin")
        lib.write_random_tokens(data, (args.steps + 2) * gb * (args.seq_len + 1))
        rows = [measure(args.ctitan, tmp, data, name, nproc, a, args.dtype, args.seq_len, args.steps)
                for name, nproc, a in layouts]

    print(f"fsdp_memory: debugmodel, seq {args.seq_len}, global batch {gb}, {args.dtype}; MiB per rank (rank 0)")
    print(f"  {'layout':32s} {'params':>8s} {'grads':>8s} {'optim':>8s} {'state':>8s} {'peak':>8s} {'comm/step':>10s}")
    for r in rows:
        print(f"  {r['name']:32s} {r['params'] / MIB:8.1f} {r['grads'] / MIB:8.1f} {r['optimizer'] / MIB:8.1f} "
              f"{r['state'] / MIB:8.1f} {r['peak'] / MIB:8.1f} {r['comm'] / MIB:10.1f}")
    by_name = {r["name"]: r for r in rows}
    ddp, fsdp = by_name["DDP(2)"], by_name["FSDP(2)"]
    print(f"  FSDP(2) / DDP(2) model state: {fsdp['state'] / ddp['state']:.3f} (target <= 0.55)")
    print(f"  FSDP(2) / DDP(2) peak       : {fsdp['peak'] / ddp['peak']:.3f} (target <= 1.00)")


if __name__ == "__main__":
    main()
