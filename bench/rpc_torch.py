#!/usr/bin/env python3
"""The PyTorch half of bench/rpc.py: bench/rpc_bench.cpp's cases with torch.distributed.rpc
(TensorPipe backend, Python functions), the same counts, options and JSON lines. rpc_bench.cpp's
header says what each case measures; this file does the same with PyTorch's API:
  --mode p2p  (2 workers) rpc_sync of a no-op and of a 1 MB fp32 echo, each call timed alone;
              no-op rpc_async with K outstanding (a FIFO window).
  --mode ps   (1 server + T trainers) the batched parameter server of PyTorch's "batch RPC with
              async execution" tutorial: an @rpc.functions.async_execution function returns the
              round's shared torch.futures.Future, completed with the new parameters by the push
              that fills the last slot.
Starts its workers itself (torch.multiprocessing, spawn) on 127.0.0.1 and a free port.

Usage: bench/rpc_torch.py --mode p2p|ps --nproc N [--calls 2000] [--warmup 200]
       [--outstanding 1,4,16] [--rounds 20] [--warmup-rounds 3] [--numel 6163712] [--threads 16]
"""
import argparse
import collections
import json
import os
import socket
import threading
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

LR = 0.01


def noop():
    pass


def echo(t):
    return t


def quantile(us, q):
    """Nearest rank, as rpc_bench.cpp: the value below which a share q of the samples fall."""
    us = sorted(us)
    return us[min(len(us) - 1, int(q * len(us)))]


def emit(record):
    print(json.dumps(dict({"rpc_bench": record.pop("case")}, **record)), flush=True)


# --- p2p: worker0 calls worker1 ------------------------------------------------------------------

def latency(name, calls, warmup, call):
    us = []
    for i in range(warmup + calls):
        start = time.perf_counter()
        call()
        if i >= warmup:
            us.append((time.perf_counter() - start) * 1e6)
    emit({"case": "latency", "payload": name, "p50_us": round(quantile(us, 0.50), 1),
          "p99_us": round(quantile(us, 0.99), 1), "calls": calls})


def throughput(window, calls, warmup):
    pending = collections.deque()
    start = None
    for i in range(warmup + calls):
        if i == warmup:
            # Timing starts with an empty window, as it ends with one.
            while pending:
                pending.popleft().wait()
            start = time.perf_counter()
        if len(pending) == window:
            pending.popleft().wait()
        pending.append(rpc.rpc_async("worker1", noop))
    while pending:
        pending.popleft().wait()
    seconds = time.perf_counter() - start
    emit({"case": "throughput", "outstanding": window, "calls_per_s": round(calls / seconds, 1), "calls": calls})


def run_p2p(args, rank):
    if rank != 0:
        return  # worker1 serves from the agent's pool until shutdown
    latency("noop", args.calls, args.warmup, lambda: rpc.rpc_sync("worker1", noop))
    mb = torch.rand(262144)  # 1 MB of fp32
    latency("echo_1mb", max(1, args.calls // 2), max(1, args.warmup // 2),
            lambda: rpc.rpc_sync("worker1", echo, args=(mb,)))
    for window in args.outstanding:
        throughput(window, args.calls, args.warmup)


# --- ps: the batched parameter server --------------------------------------------------------------

class Server:
    def __init__(self, trainers, numel, rounds_total, warmup_rounds):
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.trainers = trainers
        self.rounds_total = rounds_total
        self.warmup_rounds = warmup_rounds
        self.param = torch.zeros(numel)
        self.slots = [None] * trainers  # one gradient per trainer, index rank - 1
        self.arrived = 0
        self.round = torch.futures.Future()  # completed with `param` when the round's last push arrives
        self.rounds_done = 0
        self.completed_at = []
        self.update_s = 0.0


_server = None


@rpc.functions.async_execution
def ps_push(trainer, grad):
    s = _server
    with s.lock:
        if not 1 <= trainer <= s.trainers or s.slots[trainer - 1] is not None:
            raise RuntimeError(f"ps_push: trainer {trainer} pushed twice in round {s.rounds_done}")
        s.slots[trainer - 1] = grad
        mine = s.round
        s.arrived += 1
        if s.arrived == s.trainers:
            start = time.perf_counter()
            total = s.slots[0].clone()
            for g in s.slots[1:]:
                total.add_(g)
            s.param.add_(total, alpha=-LR / s.trainers)
            if s.rounds_done >= s.warmup_rounds:
                s.update_s += time.perf_counter() - start
            s.slots = [None] * s.trainers
            s.arrived = 0
            s.round = torch.futures.Future()
            s.completed_at.append(time.perf_counter())
            s.rounds_done += 1
            # `param` itself, not a copy: the next update waits for every trainer's next push,
            # which each makes only after its reply (these bytes) has fully arrived.
            mine.set_result(s.param)
            if s.rounds_done == s.rounds_total:
                s.finished.set()
    return mine


def run_ps(args, rank, world_size):
    total = args.warmup_rounds + args.rounds
    if rank != 0:
        grad = torch.full((args.numel,), 1e-3 * rank)
        for _ in range(total):
            param = rpc.rpc_async("worker0", ps_push, args=(rank, grad)).wait()
        return
    s = _server
    s.finished.wait()
    timed = s.completed_at[total - 1] - s.completed_at[args.warmup_rounds - 1]
    emit({"case": "ps", "trainers": world_size - 1, "rounds_per_s": round(args.rounds / timed, 2),
          "update_ms": round(1e3 * s.update_s / args.rounds, 2), "rounds": args.rounds, "numel": args.numel})


def worker(rank, args, port):
    global _server
    torch.set_num_threads(1)
    if args.mode == "ps" and rank == 0:
        _server = Server(args.nproc - 1, args.numel, args.warmup_rounds + args.rounds, args.warmup_rounds)
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=args.threads, rpc_timeout=60,
                                              init_method=f"tcp://127.0.0.1:{port}",
                                              _channels=["cma", "basic"])
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=args.nproc, rpc_backend_options=options)
    if args.mode == "p2p":
        run_p2p(args, rank)
    else:
        run_ps(args, rank, args.nproc)
    rpc.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description="torch.distributed.rpc cases of bench/rpc.py")
    parser.add_argument("--mode", required=True, choices=["p2p", "ps"])
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--outstanding", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup-rounds", type=int, default=3)
    parser.add_argument("--numel", type=int, default=6163712)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    args.outstanding = [int(x) for x in args.outstanding.split(",")]
    if args.mode == "p2p" and args.nproc != 2:
        parser.error("--mode p2p runs on 2 workers")
    if args.mode == "ps" and (args.nproc < 2 or args.warmup_rounds < 1):
        parser.error("--mode ps needs --nproc >= 2 and --warmup-rounds >= 1")
    mp.spawn(worker, args=(args, free_port()), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
