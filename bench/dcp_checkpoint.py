#!/usr/bin/env python3
"""torch.distributed.checkpoint (DCP) save and load throughput: the PyTorch 2.x baseline for
bench/checkpoint.cpp's checkpoint throughput, on the same state and the same disk.

The state is checkpoint.cpp's: --mb MiB (BENCH_CKPT_MB, default 512) of fp32 in 16 tensors
{"model": {"layer{i}.weight": randn(mb * 2^20 / 4 / 16)}}. It is saved with dcp.save and
FileSystemWriter's defaults (one file per rank, fsync of every file, 1 writer thread) into
<--dir>/dcp-step-1, read back in place with dcp.load (page cache warm, as checkpoint.cpp's
load), compared with the original outside the timing, and removed unless --keep.
With --ranks 2 the script relaunches itself under torchrun on Gloo: each tensor is then a DTensor
sharded over the 2 ranks (FSDP's layout), each rank writes its half, and the time runs from a
barrier before the call to a barrier after it on every rank.

Needs PyTorch >= 2.6 (~/.cache/ctitan/venv/bin/python). Prints one JSON line on stdout:
  save_s, load_s, save_mb_per_s, load_mb_per_s (MB = 1e6 bytes, as checkpoint.cpp prints),
  bytes, mb, tensors, ranks, dir, verified, writer, torch
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import torch_llama as tl

TENSORS = 16  # checkpoint.cpp: "a layer-sized granularity, as a model's"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="directory on the disk to measure (checkpoint.cpp's BENCH_CKPT_DIR)")
    p.add_argument("--mb", type=int, default=512, help="MiB of fp32 state (checkpoint.cpp's BENCH_CKPT_MB)")
    # Not --nproc: this script's arguments pass through torchrun's parser when it relaunches
    # itself, and that parser rejects --nproc as an ambiguous abbreviation of --nproc-per-node.
    p.add_argument("--ranks", type=int, choices=[1, 2], default=1,
                   help="processes (2: under torchrun, Gloo, DTensor shards)")
    p.add_argument("--writer-threads", type=int, default=1, help="FileSystemWriter thread_count (DCP default 1)")
    p.add_argument("--keep", action="store_true", help="leave the checkpoint in <dir>/dcp-step-1")
    args = p.parse_args()
    if args.mb < 1:
        p.error("--mb must be >= 1")
    return args


def relaunch_under_torchrun(args):
    """Runs this script as --ranks processes; rank 0's JSON line reaches our stdout unchanged."""
    # --standalone: torchrun's --master-port 0 hands MASTER_PORT=0 to the workers (2.15).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks),
           os.path.abspath(__file__)] + sys.argv[1:]
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(cmd, env=env).returncode


def make_state(per_tensor, world, rank):
    """checkpoint.cpp's state; with 2 ranks each tensor is a DTensor, this rank holding rows
    [rank * n / world, (rank + 1) * n / world)."""
    gen = torch.Generator().manual_seed(rank)
    if world == 1:
        return {"model": {f"layer{i}.weight": torch.randn(per_tensor, generator=gen) for i in range(TENSORS)}}
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    mesh = init_device_mesh("cpu", (world,))
    return {"model": {f"layer{i}.weight": DTensor.from_local(torch.randn(per_tensor // world, generator=gen), mesh,
                                                             [Shard(0)], run_check=False, shape=(per_tensor,),
                                                             stride=(1,))
                      for i in range(TENSORS)}}


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def main():
    tl.require_torch2("dcp_checkpoint.py")
    args = parse_args()
    distributed = args.ranks > 1
    if distributed and "RANK" not in os.environ:
        sys.exit(relaunch_under_torchrun(args))
    rank, world = 0, 1
    if distributed:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()

    def barrier():
        if distributed:
            dist.barrier()

    per_tensor = args.mb * (1 << 20) // 4 // TENSORS
    per_tensor -= per_tensor % world  # equal shards
    nbytes = TENSORS * per_tensor * 4
    path = os.path.join(args.dir, "dcp-step-1")
    if rank == 0:
        os.makedirs(args.dir, exist_ok=True)
        shutil.rmtree(path, ignore_errors=True)
    state = make_state(per_tensor, world, rank)
    barrier()

    writer = dcp.FileSystemWriter(path, thread_count=args.writer_threads)  # sync_files=True: fsync, as ctitan
    start = time.perf_counter()
    dcp.save(state, storage_writer=writer, no_dist=not distributed)
    barrier()
    save_s = time.perf_counter() - start

    # In place, into tensors of the same layout: what a resumed trainer does.
    loaded = {"model": {k: torch.empty_like(v) for k, v in state["model"].items()}}
    barrier()
    start = time.perf_counter()
    dcp.load(loaded, checkpoint_id=path, no_dist=not distributed)
    barrier()
    load_s = time.perf_counter() - start

    ok = all(torch.equal(local(loaded["model"][k]), local(v)) for k, v in state["model"].items())
    if distributed:
        flag = torch.tensor([int(ok)])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        ok = bool(flag.item())
    barrier()
    if rank == 0 and not args.keep:
        shutil.rmtree(path, ignore_errors=True)
    if rank == 0:
        result = {
            "save_s": save_s,
            "load_s": load_s,
            "save_mb_per_s": nbytes / save_s / 1e6,
            "load_mb_per_s": nbytes / load_s / 1e6,
            "bytes": nbytes,
            "mb": args.mb,
            "tensors": TENSORS,
            "ranks": world,
            "dir": os.path.abspath(args.dir),
            "verified": ok,
            "writer": f"FileSystemWriter(sync_files=True, single_file_per_rank=True, thread_count={args.writer_threads})",
            "torch": torch.__version__,
        }
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
    if distributed:
        dist.destroy_process_group()
    if not ok:
        sys.exit(f"dcp_checkpoint.py: the loaded state differs from the saved one ({path})")


if __name__ == "__main__":
    main()
