#!/usr/bin/env python3
"""PyTorch 2.x Llama 3 training-throughput baseline for ctitan's benchmark (bench/train_throughput.cpp).

What people write today (bench/torch_llama.py): SDPA (is_causal, GQA), nn.RMSNorm,
torch.autocast("cpu", bfloat16) with fp32 master weights for bf16, fused AdamW, global-norm
clipping at 1.0. --compile wraps the model in torch.compile (inductor); the warm-up then covers
compilation, which is timed separately and excluded from tok/s.

Needs PyTorch >= 2.6: run with ~/.cache/ctitan/venv/bin/python. Prints exactly one JSON line to
stdout: tps, step_s, loss, params, threads, dtype (as before) plus mode, compile_seconds,
first_step_s, warmup, steps, optimizer, torch.
"""
import argparse
import json
import os
import sys
import time

import torch

import torch_llama as tl


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--n-layers", type=int, required=True)
    p.add_argument("--n-heads", type=int, required=True)
    p.add_argument("--n-kv-heads", type=int, default=None)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--multiple-of", type=int, default=256)
    p.add_argument("--ffn-dim-multiplier", type=float, default=None)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps before timing; with --compile at least 3 (the first compiles)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="torch.compile(model), default inductor backend")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--activation-checkpoint", action="store_true", help="full activation checkpointing per block")
    args = p.parse_args()
    if args.n_kv_heads is None:
        args.n_kv_heads = args.n_heads
    if args.dim % args.n_heads or args.n_heads % args.n_kv_heads:
        p.error("--dim must be divisible by --n-heads, and --n-heads by --n-kv-heads")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    return args


def compiled_frames():
    """Frames dynamo has compiled so far in this process (0 without torch.compile)."""
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def main():
    tl.require_torch2("pytorch_eager_llama.py")
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model_args = tl.ModelArgs(dim=args.dim, n_layers=args.n_layers, n_heads=args.n_heads,
                              n_kv_heads=args.n_kv_heads, vocab_size=args.vocab_size,
                              multiple_of=args.multiple_of, ffn_dim_multiplier=args.ffn_dim_multiplier,
                              rope_theta=args.rope_theta, max_seq_len=max(2048, args.seq_len))
    model = tl.Transformer(model_args).to(args.device)
    model.checkpoint_layers = args.activation_checkpoint
    model.train()
    params = list(model.parameters())
    n_params = tl.count_params(model)
    optimizer, optimizer_impl = tl.build_adamw(params)
    if args.compile:
        model = torch.compile(model)
    use_bf16 = args.dtype == "bf16"

    def step():
        tokens = torch.randint(0, args.vocab_size, (args.batch, args.seq_len), device=args.device)
        labels = torch.randint(0, args.vocab_size, (args.batch, args.seq_len), device=args.device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(tokens)  # (B, T, vocab), bf16 under autocast
        loss = tl.loss_fn(logits, labels)
        loss.backward()
        tl.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return loss.item()

    # The first step compiles forward and backward under --compile; the next ones must not
    # compile again (checked below), so they measure the steady state.
    warmup = max(args.warmup, 3) if args.compile else args.warmup
    warmup_times = []
    for _ in range(warmup):
        t0 = time.perf_counter()
        step()
        warmup_times.append(time.perf_counter() - t0)

    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    frames_before = compiled_frames()
    loss = float("nan")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    elapsed = time.perf_counter() - t0
    recompiled = compiled_frames() - frames_before
    if recompiled:
        print(f"pytorch_eager_llama.py: warning: torch.compile compiled {recompiled} new frame(s) during the "
              f"timed steps; raise --warmup", file=sys.stderr)

    step_s = elapsed / args.steps
    first_step_s = warmup_times[0] if warmup_times else None
    result = {
        "tps": args.batch * args.seq_len * args.steps / elapsed,
        "step_s": step_s,
        "loss": loss,
        "params": n_params,
        "threads": args.threads,
        "dtype": args.dtype,
        "mode": "compile" if args.compile else "eager",
        # Compilation time: the first step's wall time less one steady step (the first step also
        # trains). null in eager mode.
        "compile_seconds": max(0.0, first_step_s - step_s) if args.compile and first_step_s is not None else None,
        "first_step_s": first_step_s,
        "warmup": warmup,
        "steps": args.steps,
        "recompiles_during_timing": recompiled,
        "optimizer": f"AdamW({optimizer_impl})",
        "attention": "sdpa",
        "device": args.device,
        "activation_checkpoint": args.activation_checkpoint,
        # The caching allocator's peak over the timed steps (CUDA only; null on the CPU).
        "peak_memory_bytes": torch.cuda.max_memory_allocated() if args.device == "cuda" else None,
        "torch": torch.__version__,
    }
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
