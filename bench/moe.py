#!/usr/bin/env python3
"""Mixture of experts: ctitan's Qwen3-MoE step against PyTorch, expert parallelism against one process,
and the memory per rank of EP(2) x FSDP(2) against FSDP(4).

The model: qwen3_moe debugmodel (dim 256, 4 layers, 4 query heads of 32 over 2 kv heads, QK-norm,
8 experts of hidden 256, top 2 renormalised, vocab 2048), fp32, seq 512, 4 sequences per step,
random tokens; load balancing on in ctitan (it changes no cost).

1. One process x 2 threads: ctitan against the same model in PyTorch (bench/torch_moe.py), eager
   with one matmul per expert (ctitan's CPU path), eager with torch._grouped_mm, and eager with
   torch.compile on everything but the experts (torchtitan leaves the experts uncompiled: their
   row counts change every step). Ratio: ctitan tok/s over each.
2. EP(2) on 2 ranks x 1 thread against one process x 2 threads, the same global batch: tok/s ratio
   (the all-to-all is loopback Gloo) and rank 0's peak memory.
3. 4 ranks x 1 thread (the 2 cores oversubscribed: memory only, times not comparable): EP(2) x
   FSDP(2) (dp_shard 4 = efsdp 2 x ep 2) against FSDP(4). Model state per rank should be the same
   (each holds 1/4 of every expert in both); the activations differ (EP gathers 4 experts, FSDP(4)
   gathers all 8 of a layer).

Prints its rows; exits 0 whatever the ratios (the figures go to docs/PERFORMANCE.md).
Usage: bench/moe.py [--ctitan build/bin/ctitan] [--python PYTHON] [--steps 6] [--skip-baseline]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import scaling_lib as lib

MIB = 2 ** 20
SEQ, BATCH = 512, 4
MODEL = ["--model.name", "qwen3_moe", "--model.flavor", "debugmodel"]
SHAPE = dict(dim=256, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32, vocab=2048, experts=8, top_k=2,
             moe_hidden=256, eps=1e-6, rope_theta=1e6, max_seq_len=SEQ)


def torch_worker(mode, steps, threads):
    """Trains the PyTorch model in this process; prints one JSON line {tps, step_s, loss}."""
    import torch
    import torch_llama as tl
    import torch_moe as tm
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = tm.Qwen3Moe(dict(SHAPE, grouped_mm=mode == "grouped_mm"))
    params = list(model.parameters())
    optimizer, _ = tl.build_adamw(params)
    if mode == "compile":
        for layer in model.layers:
            layer.attention = torch.compile(layer.attention)
            layer.attention_norm = torch.compile(layer.attention_norm)
            layer.ffn_norm = torch.compile(layer.ffn_norm)
        model.norm = torch.compile(model.norm)
        model.output = torch.compile(model.output)

    def step():
        tokens = torch.randint(0, SHAPE["vocab"], (BATCH, SEQ))
        labels = torch.randint(0, SHAPE["vocab"], (BATCH, SEQ))
        optimizer.zero_grad(set_to_none=True)
        loss = tl.loss_fn(model(tokens), labels)
        loss.backward()
        tl.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return loss.item()

    for _ in range(3):  # warm-up (compiles under --compile)
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    elapsed = time.perf_counter() - t0
    print(json.dumps({"tps": BATCH * SEQ * steps / elapsed, "step_s": elapsed / steps, "loss": loss}))


def pytorch_row(python, mode, steps):
    env = lib.single_env(2)
    out = lib.run(f"moe.py ({mode})", [python, os.path.abspath(__file__), "--torch-worker", mode, "--steps", str(steps)],
                  env)
    return json.loads(out.strip().splitlines()[-1])


def ctitan_row(ctitan, tmp, data, name, nproc, args, steps):
    row = lib.memory_row("moe.py", ctitan, tmp, data, name, nproc,
                         MODEL + ["--training.local_batch_size", str(BATCH // nproc if nproc <= BATCH else 1)] + args,
                         "float32", SEQ, steps)
    row["tps"] = BATCH * SEQ / row["step_s"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--torch-worker", choices=["loop", "grouped_mm", "compile"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        return torch_worker(args.torch_worker, args.steps, 2)
    lib.check_ctitan("moe.py", args.ctitan)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.bin")
        lib.write_random_tokens(data, 2_000_000, SHAPE["vocab"])
        print(f"# Qwen3-MoE debugmodel, fp32, seq {SEQ}, batch {BATCH}, {args.steps} steps after the first")
        one = ctitan_row(args.ctitan, tmp, data, "ctitan 1 process", 1, [], args.steps + 1)
        print(f"ctitan, 1 process x 2 threads:  {one['tps']:8.0f} tok/s, peak {one['peak'] / MIB:7.1f} MiB")
        if not args.skip_baseline:
            lib.check_pytorch("moe.py", args.python)
            for mode, label in [("loop", "eager, matmul per expert"), ("grouped_mm", "eager, torch._grouped_mm"),
                                ("compile", "torch.compile but the experts")]:
                r = pytorch_row(args.python, mode, args.steps)
                print(f"PyTorch {label:32s} {r['tps']:8.0f} tok/s; ctitan / PyTorch {one['tps'] / r['tps']:.2f}x")
        ep2 = ctitan_row(args.ctitan, tmp, data, "ctitan EP(2)", 2,
                         lib.degrees(1, 2) + ["--parallelism.expert_parallel_degree", "2"], args.steps + 1)
        print(f"EP(2), 2 ranks x 1 thread:      {ep2['tps']:8.0f} tok/s ({ep2['tps'] / one['tps']:.2f}x one process), "
              f"rank 0 peak {ep2['peak'] / MIB:.1f} MiB ({ep2['peak'] / one['peak']:.2f}x), state "
              f"{ep2['state'] / MIB:.1f} MiB ({ep2['state'] / one['state']:.2f}x)")
        four = ["--training.local_batch_size", "1"]
        fsdp4 = ctitan_row(args.ctitan, tmp, data, "ctitan FSDP(4)", 4, lib.degrees(1, 4) + four, 3)
        ep2f2 = ctitan_row(args.ctitan, tmp, data, "ctitan EP(2)xFSDP(2)", 4,
                           lib.degrees(1, 4) + ["--parallelism.expert_parallel_degree", "2"] + four, 3)
        for r in (fsdp4, ep2f2):
            gathered = r["fsdp"]["params"] + r["fsdp"]["grads"] + r["fsdp"]["comm"]
            print(f"{r['name'][7:]:22s} rank 0: state {r['state'] / MIB:6.2f} MiB (params {r['params'] / MIB:.2f}), "
                  f"peak {r['peak'] / MIB:7.2f} MiB, FSDP gathered at peak {gathered / MIB:.2f} MiB")
        print(f"EP(2)xFSDP(2) / FSDP(4): state {ep2f2['state'] / fsdp4['state']:.3f}x, peak "
              f"{ep2f2['peak'] / fsdp4['peak']:.2f}x")


if __name__ == "__main__":
    main()
