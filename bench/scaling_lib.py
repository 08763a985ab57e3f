"""Shared pieces of the parallelism benchmarks: random token data, running ctitan and the
PyTorch 2.x baseline (bench/torch_dp_worker.py, under torchrun), and reading their results.
Each benchmark measures its baselines in the same run, on the same model, batch and seq_len."""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
TORCH_WORKER = os.path.join(BENCH_DIR, "torch_dp_worker.py")


def write_random_tokens(path, n_tokens, vocab=2048):
    """Random tokens in the token-file format: throughput and memory do not depend on the data."""
    rng = random.Random(0)
    with open(path, "wb") as f:
        f.write(b"CTTOKS01" + struct.pack("<II", vocab, 0))
        f.write(struct.pack(f"<{n_tokens}I", *(rng.randrange(vocab) for _ in range(n_tokens))))


def run_measured(name, cmd, env):
    """Runs cmd to completion. Returns (stdout, stderr, peak RSS in bytes of the largest process in
    its tree): wait4 reports the maximum over the child and every descendant it reaped, which with
    a launcher (ctitan run, torchrun) includes each rank. Exits with the output's tail on failure."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"{name}: command failed ({proc.returncode}): {' '.join(cmd)}\n{(stdout + stderr)[-3000:]}")
    return stdout, stderr, usage.ru_maxrss * 1024  # Linux reports KiB


def run(name, cmd, env):
    return run_measured(name, cmd, env)[0]


def training_rows(metrics_path, skip_first=0):
    rows = [json.loads(line) for line in open(metrics_path)]
    return [r for r in rows if "tps" in r and r["step"] > skip_first]


# These benchmarks compare CPU runs against PyTorch on Gloo: on a GPU machine ctitan stays on the
# CPU too (CTITAN_CUDA=0: libtorch_cuda is never loaded, so training.device = auto is the CPU).
def single_env(threads):
    return dict(os.environ, CTITAN_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), CTITAN_CUDA="0")


def ranks_env():
    env = dict(os.environ, OMP_NUM_THREADS="1", CTITAN_CUDA="0")
    env.pop("CTITAN_NUM_THREADS", None)
    return env


def check_ctitan(name, ctitan):
    """Exits with one line if the ctitan binary is missing, before any run starts."""
    if not (os.path.isfile(ctitan) and os.access(ctitan, os.X_OK)):
        sys.exit(f"{name}: --ctitan {ctitan} is not an executable file; build it (make build), pass "
                 f"--ctitan PATH, or run only the PyTorch baseline with --baseline-only")


def launch(ctitan, nproc):
    return [ctitan, "run", "--nproc-per-node", str(nproc), "--master-port", "0"]


def degrees(replicate, shard, tp=1):
    """The mesh [dp_replicate, dp_shard, tp]; tp is innermost, so world = replicate * shard * tp."""
    tp_args = ["--parallelism.tensor_parallel_degree", str(tp)] if tp > 1 else []
    return ["--parallelism.data_parallel_replicate_degree", str(replicate),
            "--parallelism.data_parallel_shard_degree", str(shard)] + tp_args


def collective_share(row):
    """Share of the step this rank spent blocked in the mesh's collectives, every group's (dp and
    tp): metrics.jsonl gives bytes per step and bytes per blocked second over the same window.
    comm_exposed_ratio counts only what the trainer times around data-parallel syncs; TP's
    collectives block inside forward and backward, so for TP this is the exposed share."""
    gbps, step_s = row.get("comm_bandwidth_gbps"), row.get("time_step_s")
    if not gbps or not step_s:
        return 0.0
    return row["comm_bytes_per_step"] / (gbps * 1e9) / step_s


# --- the memory benchmarks (fsdp_memory.py, tp_memory.py) ---------------------------------------

def memory_row(bench, ctitan, tmp, data, name, nproc, args, dtype, seq_len, steps):
    """Trains the debug model (its shape changed by --model.* in `args`) for `steps` steps, one
    process x 2 threads or nproc ranks x 1 thread, and returns rank 0's figures: parameter,
    gradient and optimizer bytes after the last step, their sum ("state"), the peak live bytes
    over steps 2.., collective payload bytes per step, the mean step time over steps 2..,
    and the peak RSS of the largest process (see run_measured)."""
    folder = os.path.join(tmp, "".join(c if c.isalnum() else "_" for c in name))
    cmd = ([ctitan] if nproc == 1 else launch(ctitan, nproc)) + [
        "train", "--model.flavor", "debugmodel", "--training.dataset_path", data, "--training.seq_len", str(seq_len),
        "--training.steps", str(steps), "--training.mixed_precision_param", dtype, "--metrics.log_freq", "1",
        "--metrics.peak_flops", "1e12", "--lr_scheduler.warmup_steps", "2", "--job.dump_folder", folder] + args
    _, _, rss = run_measured(bench, cmd, single_env(2) if nproc == 1 else ranks_env())
    rows = training_rows(os.path.join(folder, "metrics.jsonl"), skip_first=1)
    last = rows[-1]
    state = last["memory_params_bytes"] + last["memory_grads_bytes"] + last["memory_optimizer_bytes"]
    peak_row = max(rows, key=lambda r: r["memory_peak_bytes"])
    # What FSDP held at that peak (0 without FSDP): gathered parameters, their gradients, buffers.
    fsdp = {k: peak_row.get(f"memory_peak_fsdp_{k}_bytes", 0) for k in ("params", "grads", "comm")}
    return {"name": name, "params": last["memory_params_bytes"], "grads": last["memory_grads_bytes"],
            "optimizer": last["memory_optimizer_bytes"], "state": state,
            "peak": peak_row["memory_peak_bytes"], "fsdp": fsdp, "comm": last["comm_bytes_per_step"],
            "step_s": sum(r["time_step_s"] for r in rows) / len(rows), "rss": rss}


# --- the PyTorch 2.x baseline -------------------------------------------------------------------

def add_baseline_args(parser):
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter with PyTorch >= 2.6 for the baseline (e.g. ~/.cache/ctitan/venv/bin/python)")
    parser.add_argument("--baseline-only", action="store_true",
                        help="run only the PyTorch baseline (no ctitan binary needed)")


def check_pytorch(name, python):
    """The baseline's torch version; exits with one line if `python` cannot run the baseline."""
    probe = ("import torch, sys; from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy; "
             "v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); "
             "v < (2, 6) and sys.exit('torch ' + torch.__version__ + ' is older than 2.6'); ")
    result = subprocess.run([python, "-c", probe + "print(torch.__version__)"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"{name}: --python {python} cannot run the PyTorch 2.x baseline ({reason}); pass "
                 f"--python ~/.cache/ctitan/venv/bin/python (scripts/setup_venv.sh makes it)")
    return result.stdout.strip()


def pytorch_env(threads):
    """ctitan's per-rank threads. Gloo on loopback: ranks share this machine."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.pop("CTITAN_NUM_THREADS", None)
    return env


def run_pytorch(name, python, nproc, threads, worker_args):
    """Runs bench/torch_dp_worker.py as one process or as nproc ranks under torchrun. Returns rank
    0's JSON result with "peak_rss_tree_bytes" (see run_measured) added."""
    # --standalone, not --master-port 0: torchrun 2.15's static rendezvous binds its store to a free
    # port but passes MASTER_PORT=0 to the workers, whose init_process_group then hangs.
    launcher = [python] if nproc == 1 else [python, "-m", "torch.distributed.run", "--standalone",
                                            "--nproc-per-node", str(nproc)]
    stdout, stderr, peak = run_measured(name, launcher + [TORCH_WORKER] + worker_args, pytorch_env(threads))
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"{name}: the PyTorch baseline printed no JSON result\n{(stdout + stderr)[-3000:]}")
    result = json.loads(lines[-1])
    result["peak_rss_tree_bytes"] = peak
    return result


# --- the scaling benchmarks (ddp_scaling.py, fsdp_scaling.py, tp_scaling.py) --------------------

def scaling(name, ctitan, tmp, parallel_args, steps, global_batch, seq_len, dtype, parallel_local_batch=None):
    """ctitan's tokens/s of 1 process x 2 threads and of 2 ranks x 1 thread with `parallel_args`, at
    the same global batch. Each rank trains global_batch / 2 sequences (data parallelism) unless
    parallel_local_batch says otherwise (TP: both ranks of a tp group train the same global_batch).
    Returns (single_tps, parallel_tps, parallel_last_row)."""
    data = os.path.join(tmp, "random.bin")
    write_random_tokens(data, (steps + 2) * global_batch * (seq_len + 1))
    common = ["train", "--model.flavor", "debugmodel", "--training.dataset_path", data,
              "--training.seq_len", str(seq_len), "--training.steps", str(steps),
              "--training.mixed_precision_param", dtype, "--metrics.log_freq", "5",
              "--metrics.peak_flops", "1e12", "--lr_scheduler.warmup_steps", "2"]
    single_dir = os.path.join(tmp, "single")
    run(name, [ctitan] + common + ["--job.dump_folder", single_dir, "--training.local_batch_size",
                                   str(global_batch)], single_env(2))
    rows = training_rows(os.path.join(single_dir, "metrics.jsonl"), 5)
    single_tps = sum(r["tps"] for r in rows) / len(rows)

    parallel_dir = os.path.join(tmp, "parallel")
    local_batch = global_batch // 2 if parallel_local_batch is None else parallel_local_batch
    run(name, launch(ctitan, 2) + common + ["--job.dump_folder", parallel_dir, "--training.local_batch_size",
                                            str(local_batch)] + parallel_args, ranks_env())
    rows = training_rows(os.path.join(parallel_dir, "metrics.jsonl"), 5)
    # metrics.jsonl reports rank 0's tokens/s; both ranks run equal shares (under TP it is already
    # per device: the tp group's tokens divided by tp).
    parallel_tps = 2 * sum(r["tps"] for r in rows) / len(rows)
    return single_tps, parallel_tps, rows[-1]


def pytorch_scaling(name, python, torch_parallel, steps, global_batch, seq_len, dtype):
    """The same two layouts in PyTorch: 1 process x 2 threads, and torch_parallel ("ddp" or "fsdp")
    over 2 ranks x 1 thread. Steps 1-5 are left out of the timing, as from ctitan's.
    Returns (single_result, parallel_result)."""
    common = ["--flavor", "debugmodel", "--seq-len", str(seq_len), "--dtype", dtype, "--steps", str(steps),
              "--skip", "5"]
    single = run_pytorch(name, python, 1, 2, common + ["--parallel", "none", "--local-batch", str(global_batch)])
    parallel = run_pytorch(name, python, 2, 1, common + ["--parallel", torch_parallel,
                                                         "--local-batch", str(global_batch // 2)])
    return single, parallel


def scaling_main(name, label, parallel_args, torch_parallel, default_dtype, target=None):
    """The command line of a scaling benchmark: runs ctitan and PyTorch in both layouts and prints
    each one's tokens/s, ctitan/PyTorch per layout, and each one's 2-rank / 1-process ratio."""
    import argparse
    parser = argparse.ArgumentParser(
        description=f"{label} 2 ranks x 1 thread against 1 process x 2 threads, ctitan and PyTorch")
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dtype", default=default_dtype, choices=["float32", "bfloat16"])
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    add_baseline_args(parser)
    args = parser.parse_args()
    if args.steps <= 5:
        parser.error("--steps must exceed 5 (the first 5 steps are not timed)")
    if not args.baseline_only:
        check_ctitan(name, args.ctitan)
    torch_version = check_pytorch(name, args.python)

    ours = None
    if not args.baseline_only:
        with tempfile.TemporaryDirectory() as tmp:
            ours = scaling(name, args.ctitan, tmp, parallel_args, args.steps, args.global_batch, args.seq_len,
                           args.dtype)
    single, parallel = pytorch_scaling(name, args.python, torch_parallel, args.steps, args.global_batch,
                                       args.seq_len, args.dtype)

    what = {"ddp": "DistributedDataParallel" + (", bf16 autocast" if args.dtype == "bfloat16" else ""),
            "fsdp": "FSDP2 fully_shard per block + root" +
                    (", MixedPrecisionPolicy(bf16 params, fp32 reduce)" if args.dtype == "bfloat16" else "")}
    print(f"{name}: debugmodel seq {args.seq_len}, global batch {args.global_batch}, {args.dtype}, "
          f"{args.steps} steps (first 5 excluded)")
    print(f"  PyTorch {torch_version} ({args.python}), eager: {what[torch_parallel]} on Gloo, "
          f"{parallel['optimizer']}")

    def cell(x, spec, suffix=""):
        return format(x, spec) + suffix if x is not None else "-"

    def ratio(a, b):
        return a / b if a is not None and b else None

    ours_single, ours_parallel = (ours[0], ours[1]) if ours else (None, None)
    print(f"  {'':28s} {'ctitan tok/s':>14s} {'PyTorch tok/s':>14s} {'ctitan/PyTorch':>15s}")
    for row, a, b in [("1 process x 2 threads", ours_single, single["tps"]),
                      (f"{label} 2 ranks x 1 thread", ours_parallel, parallel["tps"])]:
        print(f"  {row:28s} {cell(a, '.0f'):>14s} {b:14.0f} {cell(ratio(a, b), '.2f', 'x'):>15s}")
    goal = f"   (ctitan target >= {target:.2f})" if target else ""
    print(f"  {'2 ranks / 1 process':28s} {cell(ratio(ours_parallel, ours_single), '.2f', 'x'):>14s} "
          f"{parallel['tps'] / single['tps']:13.2f}x{goal}")
    if ours:
        last = ours[2]
        print(f"  ctitan {label}: exposed comm {100 * last.get('comm_exposed_ratio', 0):.1f}% of the step, "
              f"{last.get('comm_bytes_per_step', 0) / 2**20:.1f} MiB per step per rank")
