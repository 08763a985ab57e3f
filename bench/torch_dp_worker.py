#!/usr/bin/env python3
"""One rank of the PyTorch 2.x data-parallel baseline that bench/ddp_scaling.py, fsdp_scaling.py
and fsdp_memory.py compare ctitan with. Run it as one process (--parallel none) or under torchrun:

  python -m torch.distributed.run --nproc-per-node 2 --master-port PORT bench/torch_dp_worker.py \\
      --parallel fsdp --flavor debugmodel --seq-len 256 --local-batch 4 --dtype bfloat16 --steps 30

DDP: torch.nn.parallel.DistributedDataParallel on Gloo (25 MB buckets, as ctitan's default), bf16 by
autocast over fp32 weights. FSDP: FSDP2's fully_shard applied as ctitan's apply_fsdp and torchtitan
do (tok_embeddings, each block, [norm, output], then the root), bf16 by MixedPrecisionPolicy
(param_dtype bf16, reduce_dtype from --reduce-dtype, fp32 master shards). Every rank trains on its
own random tokens. Rank 0 prints one JSON line:
  tps (global tokens/s over the timed steps), step_s, timed_steps, loss, world_size, threads,
  params_bytes / grads_bytes / optimizer_bytes (rank 0's local tensors after the last step),
  peak_rss_bytes (max over ranks of each process's peak RSS), rss_after_import_bytes (rank 0,
  before the model exists), optimizer, torch.
"""
import argparse
import contextlib
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

import torch_llama as tl


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parallel", choices=["none", "ddp", "fsdp"], required=True)
    p.add_argument("--flavor", choices=sorted(tl.FLAVORS), default="debugmodel")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--local-batch", type=int, required=True, help="sequences per microbatch per rank")
    p.add_argument("--microbatches", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--reduce-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="FSDP gradient reduce-scatter dtype (ctitan's training.mixed_precision_reduce)")
    p.add_argument("--reshard-after-forward", choices=["default", "always", "never"], default="default",
                   help="ctitan's parallelism.fsdp_reshard_after_forward")
    p.add_argument("--gradient-sync", choices=["every_microbatch", "last_microbatch"], default="every_microbatch",
                   help="ctitan's parallelism.fsdp_gradient_sync")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--skip", type=int, default=5, help="first steps left out of the timing")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps <= args.skip:
        p.error(f"--steps ({args.steps}) must exceed --skip ({args.skip})")
    return args


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def local_bytes(tensors):
    """Bytes this rank holds: a DTensor (FSDP2 shard) counts only its local shard."""
    total = 0
    for t in tensors:
        if t is None or not isinstance(t, torch.Tensor):
            continue
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def apply_fsdp(model, mesh, args):
    """FSDP2 as ctitan's parallel/fsdp_plan.cpp (and torchtitan's apply_fsdp): one group per
    block; [norm, output] are needed first in backward, so by default they stay gathered."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    mp = MixedPrecisionPolicy(param_dtype=dtypes[args.dtype], reduce_dtype=dtypes[args.reduce_dtype])
    reshard_blocks = args.reshard_after_forward != "never"
    fully_shard(model.tok_embeddings, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_blocks)
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_blocks)
    fully_shard([model.norm, model.output], mesh=mesh, mp_policy=mp,
                reshard_after_forward=args.reshard_after_forward == "always")
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_blocks)
    return model


def main():
    tl.require_torch2("torch_dp_worker.py")
    args = parse_args()
    rss_after_import = peak_rss_bytes()
    # torchrun sets OMP_NUM_THREADS=1 when unset; the caller sets it to ctitan's per-rank threads.
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    distributed = args.parallel != "none"
    rank, world = 0, 1
    if distributed:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()

    # Same seed on every rank: identical initial weights, as ctitan (and DDP/FSDP assume).
    torch.manual_seed(args.seed)
    model_args = tl.FLAVORS[args.flavor]
    model = tl.Transformer(model_args)
    model.train()
    autocast = args.dtype == "bfloat16"
    if args.parallel == "ddp":
        # freqs_cis is the only buffer and a constant: synced once at init, not before every forward.
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25, forward_sync_buffers=False)
    elif args.parallel == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        model = apply_fsdp(model, init_device_mesh("cpu", (world,)), args)
        autocast = False  # MixedPrecisionPolicy already computes in bf16.
    params = list(model.parameters())
    optimizer, optimizer_impl = tl.build_adamw(params)

    # Each rank's own data stream, as ctitan's loader gives each rank its own share.
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    vocab = model_args.vocab_size
    shape = (args.local_batch, args.seq_len)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_total = 0.0
        for i in range(args.microbatches):
            last = i + 1 == args.microbatches
            if args.parallel == "fsdp":
                model.set_requires_gradient_sync(last or args.gradient_sync == "every_microbatch")
            tokens = torch.randint(0, vocab, shape, generator=gen)
            labels = torch.randint(0, vocab, shape, generator=gen)
            sync = model.no_sync() if args.parallel == "ddp" and not last else contextlib.nullcontext()
            with sync:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    logits = model(tokens)  # (B, T, vocab)
                loss = tl.loss_fn(logits, labels) / args.microbatches
                loss.backward()
            loss_total += loss.detach()
        tl.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return float(loss_total)

    for _ in range(args.skip):
        step()
    if distributed:
        dist.barrier()
    t0 = time.perf_counter()
    loss = float("nan")
    for _ in range(args.steps - args.skip):
        loss = step()
    if distributed:
        dist.barrier()
    elapsed = time.perf_counter() - t0

    timed = args.steps - args.skip
    opt_state = [t for s in optimizer.state.values() for t in s.values()]
    peak = torch.tensor([peak_rss_bytes()], dtype=torch.int64)
    if distributed:
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        result = {
            "parallel": args.parallel,
            "tps": world * args.microbatches * args.local_batch * args.seq_len * timed / elapsed,
            "step_s": elapsed / timed,
            "timed_steps": timed,
            "loss": loss,
            "world_size": world,
            "threads": torch.get_num_threads(),
            "dtype": args.dtype,
            "params_bytes": local_bytes(params),
            "grads_bytes": local_bytes(p.grad for p in params),
            "optimizer_bytes": local_bytes(opt_state),
            "peak_rss_bytes": int(peak.item()),
            "rss_after_import_bytes": rss_after_import,
            "optimizer": f"AdamW({optimizer_impl})",
            "torch": torch.__version__,
        }
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
