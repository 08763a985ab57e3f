#!/usr/bin/env python3
"""`ctitan data prepare` with 1 worker against N workers on the same corpus, in the same run, and
the same corpus read from .jsonl.gz and .jsonl.zst and from Parquet shards. Prints each wall time
(best of --repeats) and the speed-up ratio; checks that every output is byte-identical to the
serial one. The Parquet row is measured against pyarrow + `tokenizers` in Python on the same shards
(run with the venv's Python, which has both; the row is skipped without them).

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

TOKEN_FILE_HEADER_BYTES = 16  # src/ctitan/data/token_file.h


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


def python_parquet(shards, tokenizer_json, workers, repeats):
    """pyarrow reads the shards by record batch, `tokenizers` encodes each batch on `workers`
    threads (RAYON_NUM_THREADS, set before the import): the Python pipeline people write."""
    os.environ["RAYON_NUM_THREADS"] = str(workers)
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    best, tokens, docs = None, 0, 0
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = docs = 0
        for shard in shards:
            for batch in pq.ParquetFile(shard).iter_batches(batch_size=8192, columns=["text"]):
                texts = [t for t in batch.column(0).to_pylist() if t and t.strip()]
                for enc in tok.encode_batch(texts, add_special_tokens=False):
                    tokens += len(enc.ids) + 2  # + BOS and EOS, as ctitan's documents
                docs += len(texts)
        seconds = time.perf_counter() - start
        best = seconds if best is None else min(best, seconds)
    return best, tokens, docs


def parquet_rows(a, tmp, docs_written, serial, reference):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
        import tokenizers  # noqa: F401
    except ImportError:
        print("pyarrow or tokenizers not importable: Parquet rows skipped (run with the venv's Python)")
        return
    shards_dir = os.path.join(tmp, "shards")
    os.makedirs(shards_dir)
    shards = []
    per_shard = (len(docs_written) + 3) // 4
    for k in range(4):
        path = os.path.join(shards_dir, f"part-{k:05d}.parquet")
        pq.write_table(pa.table({"text": docs_written[k * per_shard:(k + 1) * per_shard]}), path,
                       row_group_size=16384, compression="snappy")
        shards.append(path)
    mib = sum(os.path.getsize(s) for s in shards) / 2 ** 20
    loader_share(a, tmp, "Parquet shards", ["--training.dataset_path", shards_dir])
    mixture = (f'[{{path = "{shards_dir}", weight = 3}}, '
               f'{{path = "{os.path.join(tmp, "corpus.jsonl.gz")}", weight = 1}}]')
    loader_share(a, tmp, "mixture of Parquet 3 : JSONL.gz 1", ["--training.dataset_path", "", "--training.datasets", mixture])
    out = os.path.join(tmp, "parquet.bin")
    seconds = prepare(a.ctitan, a.tokenizer, shards_dir, out, a.workers, a.repeats)
    assert open(out, "rb").read() == reference, "Parquet output differs from the JSONL one"
    hf = os.path.join(tmp, "hf")
    subprocess.run([a.ctitan, "tokenizer", "convert", "--tokenizer", a.tokenizer, "--output-dir", hf],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    py_seconds, py_tokens, py_docs = python_parquet(shards, os.path.join(hf, "tokenizer.json"), a.workers, a.repeats)
    ctitan_tokens = (len(reference) - TOKEN_FILE_HEADER_BYTES) // 4
    print(f"data prepare, {a.workers} workers, Parquet ({mib:.1f} MiB snappy, 4 shards): {seconds:6.2f} s "
          f"({serial / seconds:.2f}x serial plain JSONL)")
    print(f"pyarrow + tokenizers, {a.workers} threads, same shards:  {py_seconds:6.2f} s  "
          f"ctitan/python speed ratio {py_seconds / seconds:.2f}x  (tokens: ctitan {ctitan_tokens}, python {py_tokens}, "
          f"{py_docs} documents)")


def loader_share(a, tmp, label, extra):
    """The training loader's share of the step: `ctitan train` of configs/llama3_debug.toml (1 rank,
    fp32) on a dataset, mean time_data_s / time_step_s over the logged steps after the first."""
    out = os.path.join(tmp, "train_" + label.replace(" ", "_"))
    subprocess.run([a.ctitan, "train", "--config", "configs/llama3_debug.toml", "--job.dump_folder", out,
                    "--model.tokenizer_path", a.tokenizer, "--training.steps", "30", "--metrics.log_freq", "5",
                    "--training.mixed_precision_param", "float32", "--training.device", "cpu",
                    "--validation.enable", "false", "--training.dataset", "auto"] + extra,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    rows = [r for r in rows if "time_step_s" in r and r["step"] > 5]
    share = sum(r["time_data_s"] for r in rows) / sum(r["time_step_s"] for r in rows)
    print(f"training loader, {label}: data {100 * share:.3f}% of the step "
          f"({1000 * sum(r['time_data_s'] for r in rows) / len(rows):.2f} ms of "
          f"{1000 * sum(r['time_step_s'] for r in rows) / len(rows):.0f} ms; target < 1%)")


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
        parquet_rows(a, tmp, [docs[k % len(docs)] for k in range(i)], serial, reference)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
