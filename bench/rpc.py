#!/usr/bin/env python3
"""ctitan's C++ RPC (src/ctitan/rpc/) against PyTorch's torch.distributed.rpc (TensorPipe
backend, Python functions) on this machine, in one run (issue #13 section 6):

- round-trip latency p50/p99 of a no-op call and of a 1 MB fp32 tensor echo (2 workers);
- no-op calls per second with 1, 4 and 16 rpc_async calls outstanding (2 workers);
- parameter-server rounds per second with 1, 2 and 4 trainers (2, 3 and 5 workers): the batched
  update of PyTorch's "batch RPC with async execution" tutorial on a 6,163,712-float parameter
  (the debug model's count), an asynchronous function on both sides.

ctitan's side is build/bin/rpc_bench under `ctitan run --exec`; PyTorch's is bench/rpc_torch.py
(torch.multiprocessing). Both use the same cases, call and round counts, warm-up (excluded from
the timing), agent pool threads (16, PyTorch's default), TensorPipe channels (cma, basic: ctitan's
default) and one intra-op thread per process. Each figure is the best of --repeats runs of each
side, the sides alternating. rpc_bench.cpp's header says what each case does.

Targets: latency <= PyTorch's, throughput >= 2x PyTorch's. On 2 cores the processes time-slice:
3 and 5 workers (2 and 4 trainers) share two cores, and so do TensorPipe's and the pool's threads.

Usage: bench/rpc.py [--ctitan build/bin/ctitan] [--python PY] [--calls 2000] [--warmup 200]
       [--rounds 20] [--warmup-rounds 3] [--trainers 1,2,4] [--repeats 3]
"""
import argparse
import json
import os
import sys

import scaling_lib as lib

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
TORCH_SIDE = os.path.join(BENCH_DIR, "rpc_torch.py")


def records(name, stdout):
    """The {"rpc_bench": ...} lines of a run (the launcher prefixes them "[rankN]:")."""
    out = [json.loads(line[line.index('{"rpc_bench"'):]) for line in stdout.splitlines() if '{"rpc_bench"' in line]
    if not out:
        sys.exit(f"rpc: {name} printed no result line\n{stdout[-3000:]}")
    return out


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{os.cpu_count()} cores"


def main():
    parser = argparse.ArgumentParser(description="ctitan RPC against torch.distributed.rpc, with ratios")
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--rpc-bench", help="the rpc_bench binary (default: next to --ctitan)")
    parser.add_argument("--python", default=sys.executable, help="interpreter with torch for PyTorch's side")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per latency/throughput case "
                                                                "(half for the 1 MB echo)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls before each case")
    parser.add_argument("--rounds", type=int, default=20, help="timed parameter-server rounds")
    parser.add_argument("--warmup-rounds", type=int, default=3)
    parser.add_argument("--trainers", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side per case, alternating; "
                                                                   "the best figure of each side is shown")
    parser.add_argument("--numel", type=int, default=6163712, help="parameter floats (debugmodel's count)")
    args = parser.parse_args()
    rpc_bench = args.rpc_bench or os.path.join(os.path.dirname(args.ctitan), "rpc_bench")
    lib.check_ctitan("rpc", args.ctitan)
    if not os.access(rpc_bench, os.X_OK):
        sys.exit(f"rpc: {rpc_bench} is not an executable file; build it (ninja -C build rpc_bench) or pass --rpc-bench")
    torch_version = lib.check_pytorch("rpc", args.python)
    env = lib.ranks_env()  # OMP_NUM_THREADS=1 in every process, both sides
    common = ["--calls", str(args.calls), "--warmup", str(args.warmup), "--outstanding", "1,4,16",
              "--rounds", str(args.rounds), "--warmup-rounds", str(args.warmup_rounds), "--numel", str(args.numel),
              "--threads", "16"]

    def best(runs, key, lower):
        values = [r[key] for r in runs]
        return min(values) if lower else max(values)

    def both(mode, nproc):
        """Each side's records, best of --repeats runs per figure; the sides alternate, so a
        change of load on the shared machine reaches both."""
        ours, theirs = [], []
        for _ in range(args.repeats):
            ours.append(records("rpc_bench", lib.run("rpc", lib.launch(args.ctitan, nproc) +
                                                     ["--exec", rpc_bench, "--mode", mode] + common, env)))
            theirs.append(records("rpc_torch.py", lib.run("rpc", [args.python, TORCH_SIDE, "--mode", mode,
                                                                  "--nproc", str(nproc)] + common, env)))
        return list(zip(*ours)), list(zip(*theirs))  # per case: that case's record from every run

    rows = []  # (label, ctitan, PyTorch, unit, lower is better)
    ours, theirs = both("p2p", 2)
    for a, b in zip(ours, theirs):
        if a[0]["rpc_bench"] == "latency":
            what = "no-op" if a[0]["payload"] == "noop" else "1 MB echo"
            for q in ("p50", "p99"):
                rows.append((f"{what} latency {q}", best(a, f"{q}_us", True), best(b, f"{q}_us", True), "us", True))
        else:
            n = a[0]["outstanding"]
            rows.append((f"no-op calls/s, {n} outstanding", best(a, "calls_per_s", False),
                         best(b, "calls_per_s", False), "/s", False))
    updates = []
    for trainers in [int(t) for t in args.trainers.split(",")]:
        ours, theirs = both("ps", trainers + 1)
        # Each side's fastest run, with that run's update time.
        a = max(ours[0], key=lambda r: r["rounds_per_s"])
        b = max(theirs[0], key=lambda r: r["rounds_per_s"])
        rows.append((f"PS rounds/s, {trainers} trainer{'s' if trainers > 1 else ''}", a["rounds_per_s"],
                     b["rounds_per_s"], "/s", False))
        updates.append((trainers, a["update_ms"], b["update_ms"], a["rounds_per_s"], b["rounds_per_s"]))

    print(f"rpc: ctitan C++ RPC against PyTorch {torch_version} torch.distributed.rpc (TensorPipe, Python "
          f"functions), same machine, one run")
    print(f"  {cpu_name()}; 16 pool threads, channels cma+basic, 1 intra-op thread per process; "
          f"{args.calls} timed calls per case ({args.calls // 2} for the echo) after {args.warmup} "
          f"({args.warmup // 2}); {args.rounds} PS rounds after {args.warmup_rounds}, {args.numel} fp32 parameters; "
          f"best of {args.repeats} alternating runs per side")
    print(f"  {'':34s} {'ctitan':>10s} {'PyTorch':>10s} {'ctitan/PyTorch':>15s} {'target':>8s} {'met':>4s}")
    for label, a, b, unit, lower in rows:
        ratio = a / b
        met = ratio <= 1.0 if lower else ratio >= 2.0
        print(f"  {label + ' (' + unit + ')':34s} {a:10.1f} {b:10.1f} {ratio:14.2f}x "
              f"{'<= 1.00' if lower else '>= 2.00':>8s} {'yes' if met else 'no':>4s}")
    print("  PS: the server's update per round (sum of the T gradients, one axpy; the same ATen ops on both sides) "
          "and its share of the round:")
    for trainers, ua, ub, ra, rb in updates:
        print(f"    {trainers} trainer{'s' if trainers > 1 else ' '}  ctitan {ua:6.2f} ms ({100 * ua * ra / 1e3:4.1f}%)"
              f"   PyTorch {ub:6.2f} ms ({100 * ub * rb / 1e3:4.1f}%)")
    if os.cpu_count() and os.cpu_count() < 5:
        print(f"  {os.cpu_count()} cores: the 3- and 5-worker PS runs time-slice their processes")


if __name__ == "__main__":
    main()
