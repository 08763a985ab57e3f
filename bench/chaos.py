#!/usr/bin/env python3
"""Chaos soak of `ctitan run --max-restarts 3` (issue #17): SIGKILL a random rank of a tiny
2-rank training job at a random moment (during start-up, in the first steps, mid-run, inside a
checkpoint save) and check that the job still finishes (exit 0), that its final loss is bitwise
equal to an uninterrupted run's, and that no process is left behind. Then SIGSTOP a random rank of
a DDP and of an FSDP job (no restarts) and check that the collective timeout ends the job within
comm.train_timeout_seconds + 15 s, naming the collective, its group and the stopped rank.

Job: the model of tests/support/tiny_job.cpp (dim 64, 2 layers, vocab 32, seq 32, 30 steps,
fp32, seed 7) on a cyclic token file, checkpoint every 5 steps (full last save); layouts FSDP(2),
DDP(2) and TP(2), each against its own uninterrupted reference.

Usage: bench/chaos.py [--ctitan build/bin/ctitan] [--trials 20] [--other-trials 3] [--seed 0]
                      [--timeout 300] [--no-stall] [--keep]
Exits 0 even when a trial fails (it reports): look for lines starting with FAIL.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import scaling_lib as lib

STEPS = 30
INTERVAL = 5
MAX_RESTARTS = 3
LAYOUTS = {"FSDP(2)": lib.degrees(1, 2), "DDP(2)": lib.degrees(2, 1), "TP(2)": lib.degrees(1, 1, tp=2)}
KILL_MODES = ["startup", "first-steps", "mid-run", "in-save"]
STEP_LINE = re.compile(r"^\[rank(\d+)\]:.*\binfo step:\s+(\d+)\s+loss:", re.M)
RESTART_LINE = re.compile(r"run: round \d+ failed: .*; restarting \(\d+ of \d+ restarts\)")


def write_cyclic_tokens(path, n_tokens=20000, period=16, vocab=32):
    """tests/support/tiny_job.cpp's write_cyclic_token_file: token i is i % period."""
    with open(path, "wb") as f:
        f.write(b"CTTOKS01" + struct.pack("<II", vocab, 0))
        f.write(struct.pack(f"<{n_tokens}i", *(i % period for i in range(n_tokens))))


def train_args(data, folder, layout_args):
    return ["train", "--job.dump_folder", folder, "--training.dataset_path", data,
            "--model.dim", "64", "--model.n_layers", "2", "--model.n_heads", "4", "--model.vocab_size", "32",
            "--training.seq_len", "32", "--training.local_batch_size", "2", "--training.steps", str(STEPS),
            "--training.mixed_precision_param", "float32", "--optimizer.lr", "3e-3",
            "--lr_scheduler.warmup_steps", "5", "--metrics.log_freq", "1", "--metrics.peak_flops", "1e12",
            "--debug.seed", "7"] + layout_args


def checkpoint_args():
    return ["--checkpoint.enable", "true", "--checkpoint.interval", str(INTERVAL),
            "--checkpoint.last_save_model_only", "false"]


def final_loss(folder):
    """(step, loss) of the last metrics.jsonl row with a loss. Rows of re-run steps are appended
    after a restart, so the last row is the last step's. A torn last line (a kill mid-write) is
    skipped."""
    last = None
    try:
        with open(os.path.join(folder, "metrics.jsonl")) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if "loss" in row:
                    last = (row["step"], row["loss"])
    except OSError:
        pass
    return last


def bits(x):
    return struct.pack(">d", x).hex() if isinstance(x, float) else None


def process_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def leftovers(folder):
    """Live processes (not zombies) whose command line names the trial's dump folder."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if folder in cmdline and process_state(entry) not in (None, "Z"):
            found.append((int(entry), process_state(entry), cmdline[:120]))
    return found


def reap_leftovers(folder):
    """Leftovers still there 1 s after the launcher exited are orphans: SIGKILL them."""
    found = leftovers(folder)
    if found:
        time.sleep(1.0)
        found = leftovers(folder)
    for pid, _, _ in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return found


def worker_pid(launcher_pid, rank):
    """The launcher's child whose environment has RANK=rank, or None."""
    children = []
    try:
        for task in os.listdir(f"/proc/{launcher_pid}/task"):
            with open(f"/proc/{launcher_pid}/task/{task}/children") as f:
                children += [int(p) for p in f.read().split()]
    except OSError:
        return None
    for child in children:
        try:
            with open(f"/proc/{child}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return child
    return None


class Run:
    """One `ctitan run` whose stdout and stderr go to files read back while it runs."""

    def __init__(self, cmd, folder):
        os.makedirs(folder, exist_ok=True)
        self.cmd, self.folder = cmd, folder
        self.out_path, self.err_path = os.path.join(folder, "launcher.out"), os.path.join(folder, "launcher.err")
        self.start = time.monotonic()
        self.raw = [b"", b""]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            # A session of its own: a trial past its timeout is killed as one process group.
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=lib.ranks_env(), start_new_session=True)

    def output(self):
        """Everything printed so far, stdout then stderr, read incrementally (polled every few ms)."""
        for i, path in enumerate((self.out_path, self.err_path)):
            with open(path, "rb") as f:
                f.seek(len(self.raw[i]))
                self.raw[i] += f.read()
        return (self.raw[0] + self.raw[1]).decode(errors="replace")

    def last_step(self, rank):
        steps = [int(s) for r, s in STEP_LINE.findall(self.output()) if int(r) == rank]
        return max(steps) if steps else 0

    def elapsed(self):
        return time.monotonic() - self.start

    def wait(self, timeout):
        """The exit code, or None after killing the launcher's process group at the timeout."""
        try:
            return self.proc.wait(timeout=max(0.0, timeout - self.elapsed()))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return None


def incomplete_save(folder):
    """The step-N directory of a save in progress (no metadata.json yet), or None."""
    ckpt = os.path.join(folder, "checkpoint")
    try:
        names = os.listdir(ckpt)
    except OSError:
        return None
    for name in names:
        if name.startswith("step-") and not os.path.exists(os.path.join(ckpt, name, "metadata.json")):
            return name
    return None


def kill_trial(ctitan, data, tmp, layout, index, seed, timeout):
    """One kill trial; returns a dict of what happened."""
    rng = random.Random(f"{seed}-{layout}-{index}")
    mode = KILL_MODES[index % len(KILL_MODES)]
    rank = rng.randrange(2)
    folder = os.path.join(tmp, f"{layout.split('(')[0].lower()}_kill_{index:02d}")
    cmd = lib.launch(ctitan, 2) + ["--max-restarts", str(MAX_RESTARTS)] + train_args(data, folder, LAYOUTS[layout]) + checkpoint_args()
    if mode == "startup":
        target = f"{rng.uniform(0.0, 1.5):.3f} s after the worker starts"
    elif mode == "first-steps":
        target_step = rng.randint(1, 3)
        target = f"after rank {rank} logs step {target_step}"
    elif mode == "mid-run":
        target_step = rng.randint(6, STEPS - 2)
        target = f"after rank {rank} logs step {target_step}"
    else:
        target_step = rng.choice(range(INTERVAL, STEPS, INTERVAL))
        target = f"while step-{target_step} has no metadata.json"
    run = Run(cmd, folder)
    result = {"layout": layout, "index": index, "mode": mode, "rank": rank, "target": target, "cmd": cmd,
              "seed": seed, "folder": folder, "killed": None, "landed": "not killed"}

    pid = None
    while run.proc.poll() is None and run.elapsed() < timeout:
        pid = pid or worker_pid(run.proc.pid, rank)
        if pid is None:
            time.sleep(0.002)
            continue
        if mode == "startup":
            time.sleep(float(target.split()[0]))
            fire = True
        elif mode in ("first-steps", "mid-run"):
            fire = run.last_step(rank) >= target_step
        else:
            partial = incomplete_save(folder)
            fire = partial == f"step-{target_step}"
            # Missed the window (the save committed between two polls): kill right after it instead.
            late = os.path.exists(os.path.join(folder, "checkpoint", f"step-{target_step}", "metadata.json"))
            fire = fire or late
        if fire:
            step, partial = run.last_step(rank), incomplete_save(folder)
            try:
                os.kill(pid, signal.SIGKILL)
                result["killed"] = pid
            except ProcessLookupError:
                result["landed"] = "worker gone before the kill"
                break
            result["at_s"] = run.elapsed()
            result["landed"] = (f"in the save of {partial}" if partial else f"after step {step}" if step else "start-up")
            result["where"] = ("in save" if partial else "start-up" if step == 0 else
                               "steps 1-3" if step <= 3 else "mid-run")
            break
        time.sleep(0.0005 if mode == "in-save" else 0.002)

    code = run.wait(timeout)
    output = run.output()
    result.update(code=code, seconds=run.elapsed(), restarts=len(RESTART_LINE.findall(output)),
                  final=final_loss(folder), orphans=reap_leftovers(folder), output=output)
    return result


def stall_trial(ctitan, data, tmp, layout, seed, stall_timeout, timeout):
    """SIGSTOP a random rank mid-run with no restarts: the job must fail within stall_timeout + 15 s,
    its error naming the collective, the group and the stopped rank."""
    rng = random.Random(f"{seed}-stall-{layout}")
    rank, target_step = rng.randrange(2), rng.randint(5, STEPS - 10)
    folder = os.path.join(tmp, f"{layout.split('(')[0].lower()}_stall")
    # No checkpointing: a stall inside a save is reported by the save's exchange ("did not
    # arrive"), which tests/distributed/collective_timeout_cli_test.cpp covers; here the stall
    # must land in a training collective.
    cmd = lib.launch(ctitan, 2) + ["--max-restarts", "0"] + \
        train_args(data, folder, LAYOUTS[layout]) + ["--comm.train_timeout_seconds", str(stall_timeout)]
    run = Run(cmd, folder)
    result = {"layout": layout, "rank": rank, "target_step": target_step, "cmd": cmd, "seed": seed,
              "folder": folder, "stopped": None, "detect_s": None, "end_s": None}
    pid, stopped_at = None, None
    while run.proc.poll() is None and run.elapsed() < timeout:
        pid = pid or worker_pid(run.proc.pid, rank)
        if pid is not None and run.last_step(rank) >= target_step:
            os.kill(pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            result["stopped"], result["stop_step"] = pid, run.last_step(rank)
            break
        time.sleep(0.002)
    while stopped_at is not None and run.proc.poll() is None and run.elapsed() < timeout:
        if result["detect_s"] is None and "collective timeout" in run.output():
            result["detect_s"] = time.monotonic() - stopped_at
        time.sleep(0.05)
    code = run.wait(timeout)
    if stopped_at is not None:
        result["end_s"] = time.monotonic() - stopped_at
    output = run.output()
    lines = [l for l in output.splitlines() if "collective timeout" in l]
    result.update(code=code, output=output, error=lines[0] if lines else None, orphans=reap_leftovers(folder))
    if result["detect_s"] is None and lines and result["end_s"] is not None:
        result["detect_s"] = result["end_s"]  # printed between two polls of the exit: an upper bound
    return result


def print_failure(kind, result, why):
    print(f"FAIL {kind} {result['layout']}: {why}")
    print(f"  seed {result['seed']}; command: {' '.join(result['cmd'])}")
    tail = result["output"].strip().splitlines()[-12:]
    print("  output (last lines):\n" + "\n".join("    " + l[:240] for l in tail))


def main():
    parser = argparse.ArgumentParser(description="chaos soak of ctitan run --max-restarts (issue #17)")
    parser.add_argument("--ctitan", default="build/bin/ctitan")
    parser.add_argument("--trials", type=int, default=20, help="FSDP(2) kill trials")
    parser.add_argument("--other-trials", type=int, default=3, help="kill trials each for DDP(2) and TP(2)")
    parser.add_argument("--seed", type=int, default=0, help="picks ranks and moments; printed with failures")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run before it counts as failed")
    parser.add_argument("--stall-timeout", type=int, default=10, help="comm.train_timeout_seconds of the stall trials")
    parser.add_argument("--no-stall", action="store_true", help="skip the SIGSTOP trials")
    parser.add_argument("--keep", action="store_true", help="keep the dump folders (printed)")
    args = parser.parse_args()
    ctitan = os.path.abspath(args.ctitan)
    lib.check_ctitan("chaos", ctitan)

    tmp = tempfile.mkdtemp(prefix="ctitan_chaos_")
    data = os.path.join(tmp, "cyclic.bin")
    write_cyclic_tokens(data)
    print(f"chaos: {STEPS}-step tiny job, 2 ranks, checkpoint every {INTERVAL} steps, --max-restarts {MAX_RESTARTS}, "
          f"seed {args.seed}, folders in {tmp}")

    summary = []
    plan = [("FSDP(2)", args.trials), ("DDP(2)", args.other_trials), ("TP(2)", args.other_trials)]
    for layout, trials in plan:
        if trials <= 0:
            continue
        ref_folder = os.path.join(tmp, f"{layout.split('(')[0].lower()}_reference")
        ref_cmd = lib.launch(ctitan, 2) + ["--max-restarts", str(MAX_RESTARTS)] + train_args(data, ref_folder, LAYOUTS[layout]) + \
            checkpoint_args()
        ref = Run(ref_cmd, ref_folder)
        code = ref.wait(args.timeout)
        reference = final_loss(ref_folder)
        if code != 0 or reference is None or reference[0] != STEPS:
            print_failure("reference", {"layout": layout, "seed": args.seed, "cmd": ref_cmd, "output": ref.output()},
                          f"the uninterrupted run exited {code} with final row {reference}")
            continue
        print(f"{layout} reference: step {reference[0]} loss {reference[1]!r} (bits {bits(reference[1])}), "
              f"{ref.elapsed():.1f} s")
        counts = {"trials": 0, "completed": 0, "equal": 0, "orphans": 0, "restarts": 0, "landed": {}}
        for i in range(trials):
            r = kill_trial(ctitan, data, tmp, layout, i, args.seed, args.timeout)
            counts["trials"] += 1
            where = r.get("where", "no kill")
            counts["landed"][where] = counts["landed"].get(where, 0) + 1
            ok_exit = r["code"] == 0
            equal = ok_exit and r["final"] is not None and r["final"][0] == STEPS and \
                bits(r["final"][1]) == bits(reference[1])
            counts["completed"] += ok_exit
            counts["equal"] += equal
            counts["orphans"] += len(r["orphans"])
            counts["restarts"] += r["restarts"]
            at = f" at {r['at_s']:.2f} s" if "at_s" in r else ""
            print(f"  {layout} trial {i:2d}: {r['mode']:11s} kill rank {r['rank']} ({r['target']}) -> landed "
                  f"{r['landed']}{at}; exit {r['code']}, {r['restarts']} restart(s), final "
                  f"{r['final'][1] if r['final'] else None!r}, {'bitwise equal' if equal else 'DIFFERENT'}, "
                  f"{len(r['orphans'])} orphan(s), {r['seconds']:.1f} s")
            if r["code"] is None:
                print_failure("kill", r, f"trial {i} did not end within {args.timeout:.0f} s (process group killed)")
            elif not ok_exit:
                print_failure("kill", r, f"trial {i} exited {r['code']}")
            elif not equal:
                print_failure("kill", r, f"trial {i} final {r['final']} != reference {reference} "
                                         f"(bits {bits(r['final'][1]) if r['final'] else None} vs {bits(reference[1])})")
            if r["orphans"]:
                print_failure("kill", r, f"trial {i} left {r['orphans']} behind (SIGKILLed)")
            if r["killed"] is None:
                print(f"  note: trial {i} killed nothing ({r['landed']})")
        summary.append((layout, counts))

    stalls = []
    if not args.no_stall:
        for layout in ("DDP(2)", "FSDP(2)"):
            s = stall_trial(ctitan, data, tmp, layout, args.seed, args.stall_timeout, args.timeout)
            limit = args.stall_timeout + 15
            error = s["error"] or ""
            names = bool(re.search(r"collective timeout: \S+ #\d+ on group '[^']+'", error)) and \
                f"not issued by rank {s['rank']} " in error
            ok = (s["stopped"] is not None and s["code"] not in (0, None) and s["end_s"] is not None and
                  s["end_s"] <= limit and names and not s["orphans"])
            stalls.append((layout, s, names, ok))
            detect = f"{s['detect_s']:.1f} s" if s["detect_s"] is not None else "-"
            end = f"{s['end_s']:.1f} s" if s["end_s"] is not None else "-"
            print(f"  {layout} stall: SIGSTOP rank {s['rank']} after its step {s.get('stop_step')}: error after "
                  f"{detect}, exit {s['code']} after {end} (limit {limit} s), {len(s['orphans'])} orphan(s)")
            print(f"    {error.strip()[:300] or '(no collective timeout line)'}")
            if not ok:
                why = ("the rank was never stopped" if s["stopped"] is None else
                       f"exit {s['code']} after {end} (limit {limit} s), error names the collective, group and "
                       f"rank {s['rank']}: {names}, orphans {s['orphans']}")
                print_failure("stall", s, why)

    print()
    print(f"{'layout':9s} {'trials':>6s} {'completed':>9s} {'bitwise-equal':>13s} {'orphans':>7s} "
          f"{'restarts used':>13s}  kills landed")
    for layout, c in summary:
        landed = ", ".join(f"{k} {v}" for k, v in sorted(c["landed"].items()))
        print(f"{layout:9s} {c['trials']:6d} {c['completed']:9d} {c['equal']:13d} {c['orphans']:7d} "
              f"{c['restarts']:13d}  {landed}")
    if stalls:
        print()
        print(f"{'stall':9s} {'stopped rank':>12s} {'at step':>7s} {'error after':>11s} {'exit after':>10s} "
              f"{'limit':>5s} {'exit':>4s} {'names rank':>10s} {'orphans':>7s}  result")
        for layout, s, names, ok in stalls:
            detect = f"{s['detect_s']:.1f} s" if s["detect_s"] is not None else "-"
            end = f"{s['end_s']:.1f} s" if s["end_s"] is not None else "-"
            print(f"{layout:9s} {s['rank']:12d} {str(s.get('stop_step', '-')):>7s} {detect:>11s} {end:>10s} "
                  f"{args.stall_timeout + 15:4d}s {str(s['code']):>4s} {'yes' if names else 'no':>10s} "
                  f"{len(s['orphans']):7d}  {'ok' if ok else 'FAIL'}")
    if args.keep:
        print(f"dump folders kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
