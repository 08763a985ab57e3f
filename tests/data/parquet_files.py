"""Writes the Parquet files that ctitan's tests read, with pyarrow (an independent writer).

Usage: parquet_files.py SPEC.json. SPEC is a list of files, each an object:
  path            where to write
  rows            list of texts (null: a null row)            -- or --
  big_bytes       write about this many bytes of generated UTF-8 text instead of `rows`
  row_bytes       (big) bytes per row; default 65536
  write_batch_size (big) rows between pyarrow's page-size checks; default 1024
  column          the text column's name (default "text"); a second column "id" is written beside it
  type            string | large_string | binary | int64 | list (default string)
  row_group_size  rows per row group (default: pyarrow's)
  compression     snappy | zstd | gzip | none (default snappy)
  use_dictionary  default true
  truncate_bytes  cut this many bytes off the end afterwards (a damaged footer)
Prints one JSON line per file: {"path", "num_row_groups", "compression", "num_rows"}.
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def column_array(rows, kind):
    if kind == "string":
        return pa.array(rows, type=pa.string())
    if kind == "large_string":
        return pa.array(rows, type=pa.large_string())
    if kind == "binary":
        return pa.array([None if r is None else r.encode() for r in rows], type=pa.binary())
    if kind == "int64":
        return pa.array([None if r is None else len(r) for r in rows], type=pa.int64())
    if kind == "list":
        return pa.array([None if r is None else [r] for r in rows], type=pa.list_(pa.string()))
    raise SystemExit(f"unknown type {kind}")


def write_big(spec, column):
    # Rows of generated text, a row group at a time so this process never holds the whole file.
    row_bytes = spec.get("row_bytes", 65536)
    group_rows = max(1, spec.get("row_group_size", 4096))
    total_rows = spec["big_bytes"] // row_bytes
    words = [f"w{i:05d}" for i in range(4096)]
    pieces = [" ".join(words[(k * 7) % 4000:(k * 7) % 4000 + 96]) for k in range(64)]
    schema = pa.schema([(column, pa.string()), ("id", pa.int64())])
    # write_batch_size: pyarrow checks the page size (1 MiB) only every that many rows, so with the
    # default 1024 rows of 64 KiB texts a page would be 64 MiB. 16 keeps pages near 1 MiB.
    with pq.ParquetWriter(spec["path"], schema, compression=spec.get("compression", "none"),
                          use_dictionary=spec.get("use_dictionary", False),
                          write_batch_size=spec.get("write_batch_size", 1024)) as writer:
        done = 0
        while done < total_rows:
            n = min(group_rows, total_rows - done)
            texts = []
            for r in range(done, done + n):
                text = pieces[r % 64]
                texts.append((text * (row_bytes // len(text) + 1))[:row_bytes])
            writer.write_table(pa.table({column: pa.array(texts, pa.string()),
                                         "id": pa.array(range(done, done + n), pa.int64())}, schema=schema),
                               row_group_size=n)
            done += n


def main():
    with open(sys.argv[1]) as f:
        specs = json.load(f)
    for spec in specs:
        column = spec.get("column", "text")
        if "big_bytes" in spec:
            write_big(spec, column)
        else:
            rows = spec["rows"]
            table = pa.table({column: column_array(rows, spec.get("type", "string")),
                              "id": pa.array(range(len(rows)), pa.int64())})
            pq.write_table(table, spec["path"], row_group_size=spec.get("row_group_size"),
                           compression=spec.get("compression", "snappy"),
                           use_dictionary=spec.get("use_dictionary", True))
        if spec.get("truncate_bytes"):
            size = os.path.getsize(spec["path"])
            os.truncate(spec["path"], size - spec["truncate_bytes"])
            print(json.dumps({"path": spec["path"]}))
            continue
        meta = pq.ParquetFile(spec["path"]).metadata
        print(json.dumps({"path": spec["path"], "num_row_groups": meta.num_row_groups, "num_rows": meta.num_rows,
                          "compression": meta.row_group(0).column(0).compression if meta.num_row_groups else None}))


if __name__ == "__main__":
    main()
