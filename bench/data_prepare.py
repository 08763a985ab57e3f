#!/usr/bin/env python3
"""`ctitan data prepare` with 1 worker against N workers on the same corpus, in the same run, and
the same corpus read from .jsonl.gz and .jsonl.zst. Prints each wall time (best of --repeats) and
the speed-up ratio; checks that every output is byte-identical to the serial one.

Target: >= 1.7x with 2 workers on 2 cores.
Corpus: the fortunes files of /usr/share/games/fortunes (what `make demo` trains on), repeated to
--mib MiB of JSONL; tokenizer: build/assets/fortunes_2k.model (the demo's 2,048-token BPE).
Usage: bench/data_prepare.py [--ctitan build/bin/ctitan] [--workers 2] [--mib 48] [--repeats 2]
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import tempfile
import time


def fortunes():
    docs = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith(".dat") or os.path.isdir(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            docs += [d for d in f.read().split("\n%\n") if d.strip()]
    return docs


def prepare(ctitan, tokenizer, data, out, workers, repeats):
    best = None
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([ctitan, "data", "prepare", "--input", data, "--tokenizer", tokenizer, "--output", out,
                        "--workers", str(workers), "--overwrite"], check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        best = seconds if best is None else min(best, seconds)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ctitan", default="build/bin/ctitan")
    p.add_argument("--tokenizer", default="build/assets/fortunes_2k.model")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mib", type=int, default=48)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctitan_prepare_bench_")
    try:
        docs = fortunes()
        data = os.path.join(tmp, "corpus.jsonl")
        with open(data, "w") as f:
            written, i = 0, 0
            while written < a.mib * 2 ** 20:
                line = json.dumps({"text": docs[i % len(docs)]}) + "\n"
                f.write(line)
                written += len(line)
                i += 1
        with open(data, "rb") as src, gzip.open(data + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        zst = shutil.which("zstd")
        if zst:
            subprocess.run([zst, "-q", "-3", data, "-o", data + ".zst"], check=True)
        print(f"corpus: {written / 2 ** 20:.1f} MiB of JSONL, {i} documents; tokenizer {a.tokenizer}; "
              f"{os.cpu_count()} CPUs; best of {a.repeats}")
        serial = prepare(a.ctitan, a.tokenizer, data, os.path.join(tmp, "w1.bin"), 1, a.repeats)
        parallel = prepare(a.ctitan, a.tokenizer, data, os.path.join(tmp, "wn.bin"), a.workers, a.repeats)
        print(f"data prepare, 1 worker:   {serial:6.2f} s  {written / 2 ** 20 / serial:6.1f} MiB/s")
        print(f"data prepare, {a.workers} workers:  {parallel:6.2f} s  {written / 2 ** 20 / parallel:6.1f} MiB/s"
              f"  speed-up {serial / parallel:.2f}x (target >= 1.7x)")
        reference = open(os.path.join(tmp, "w1.bin"), "rb").read()
        assert open(os.path.join(tmp, "wn.bin"), "rb").read() == reference, "parallel output differs"
        for suffix in [".gz"] + ([".zst"] if zst else []):
            out = os.path.join(tmp, "c" + suffix.replace(".", "_") + ".bin")
            seconds = prepare(a.ctitan, a.tokenizer, data + suffix, out, a.workers, 1)
            assert open(out, "rb").read() == reference, f"{suffix} output differs"
            print(f"data prepare, {a.workers} workers, .jsonl{suffix}: {seconds:6.2f} s ({serial / seconds:.2f}x serial plain)")
        if not zst:
            print("zstd command not installed: .jsonl.zst row skipped (apt-get install zstd)")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
