#!/usr/bin/env python3
"""Compile time per translation unit and per target, read from a Ninja build's own log.

    scripts/build_times.py [BUILD_DIR] [--top N]

Ninja appends one line per command it ran to BUILD_DIR/.ninja_log (start and end in ms since the
build began, the output's path). Only the newest entry of each output counts, so after an
incremental build the figures are those of the last time each file was compiled. CPU time is the
sum of the commands' wall times; with -j2 the build's wall time is about half of it.
"""
import argparse
import collections
import os
import re
import signal
import sys


def read_log(path):
    """{output: (start_ms, end_ms, end_abs_ms)}, the newest entry per output. Ninja's times count
    from the start of each ninja run, and it rewrites (recompacts) the log in no particular order;
    the third column, the output's mtime, is absolute and places each command in time."""
    entries = {}
    with open(path) as f:
        header = f.readline()
        if not header.startswith("# ninja log"):
            sys.exit(f"build_times: {path} is not a Ninja log (first line {header.strip()!r})")
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 4:
                continue
            start, end, mtime, output = int(fields[0]), int(fields[1]), int(fields[2]), fields[3]
            entries[output] = (start, end, mtime // 1_000_000)  # mtime: ns since the epoch
    return entries


def busy_wall_ms(entries):
    """The time during which at least one command ran: the union of their intervals."""
    spans = sorted((m - (e - s), m) for s, e, m in entries.values() if m > 0)
    total, cur_start, cur_end = 0, None, None
    for a, b in spans:
        if cur_end is None or a > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


# CMake's object paths: CMakeFiles/<target>.dir/<source path>.o, and the target's precompiled
# header CMakeFiles/<target>.dir/cmake_pch.hxx.gch.
OBJECT = re.compile(r"(?:^|/)CMakeFiles/([^/]+)\.dir/(.+)\.(o|gch)$")


def classify(output):
    """(target, unit) for an object file or precompiled header; (None, output) for the rest."""
    m = OBJECT.search(output)
    if not m:
        return None, output
    unit = "<precompiled header>" if m.group(3) == "gch" else m.group(2)
    return m.group(1), unit


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", nargs="?", default="build")
    parser.add_argument("--top", type=int, default=25, help="slowest units to list (default 25)")
    args = parser.parse_args()
    log = os.path.join(args.build_dir, ".ninja_log")
    if not os.path.isfile(log):
        sys.exit(f"build_times: no {log}: build with Ninja first (make build does)")
    entries = read_log(log)
    if not entries:
        sys.exit(f"build_times: {log} lists no commands")

    units, others = [], []
    per_target = collections.defaultdict(lambda: [0, 0])  # target -> [ms, units]
    for output, (start, end, _) in entries.items():
        target, unit = classify(output)
        ms = end - start
        if target is None:
            others.append((ms, output))
            continue
        units.append((ms, target, unit))
        per_target[target][0] += ms
        per_target[target][1] += 1

    cpu = sum(ms for ms, _, _ in units) + sum(ms for ms, _ in others)
    print(f"{len(units)} translation units, {len(others)} other commands; CPU {cpu / 60000:.1f} min, "
          f"mean {sum(ms for ms, _, _ in units) / max(1, len(units)) / 1000:.1f} s per unit")
    print(f"wall {busy_wall_ms(entries) / 60000:.1f} min while commands ran (after several builds in "
          f"one directory: the newest compile of each output)")
    print()
    print(f"{'target':<28} {'units':>5} {'CPU min':>8} {'mean s':>7}")
    for target, (ms, n) in sorted(per_target.items(), key=lambda kv: -kv[1][0]):
        print(f"{target:<28} {n:>5} {ms / 60000:>8.1f} {ms / n / 1000:>7.1f}")
    print()
    print(f"slowest {args.top} units:")
    for ms, target, unit in sorted(units, reverse=True)[:args.top]:
        print(f"  {ms / 1000:6.1f} s  {target:<22} {unit}")
    slow_others = sorted(others, reverse=True)[:5]
    if slow_others:
        print("slowest other commands (links, custom commands):")
        for ms, output in slow_others:
            print(f"  {ms / 1000:6.1f} s  {output}")


if __name__ == "__main__":
    main()
