#!/usr/bin/env python3
"""Writes the small seed corpora of the fuzz targets into fuzz/corpus/<name>/ (all generated
here: no third-party text). Needs the `ctitan` binary for the tokenizer seeds.
Usage: fuzz/make_seeds.py path/to/ctitan"""
import base64, json, os, random, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.abspath(__file__))
CTITAN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "build", "bin", "ctitan")
rng = random.Random(17)


def put(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


WORDS = "the cat sat on a mat and ran to see how many tokens fit in one small line of text".split()
text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(400))

# Tokenizers: a 300-token BPE trained on the generated text, as a rank file and as tokenizer.json.
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "words.txt"), "w") as f:
        f.write(text)
    model = os.path.join(tmp, "tok.model")
    subprocess.run([CTITAN, "tokenizer", "train", "--input", os.path.join(tmp, "words.txt"), "--vocab-size", "300",
                    "--output", model], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([CTITAN, "tokenizer", "convert", "--tokenizer", model, "--output-dir", os.path.join(tmp, "hf")],
                   check=True, stdout=subprocess.DEVNULL)
    put("tiktoken", "trained_300.model", open(model, "rb").read())
    put("hf_tokenizer_json", "trained_300.json", open(os.path.join(tmp, "hf", "tokenizer.json"), "rb").read())
# The smallest valid rank file: the 256 bytes, in a shuffled order with a blank line.
lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
rng.shuffle(lines)
lines.insert(10, "")
put("tiktoken", "bytes_only.model", "\n".join(lines) + "\n")

# Checkpoint metadata.json, as checkpoint/metadata.cpp writes it (new and pre-TP entries).
entry = {"part": "model", "key": "tok_embeddings.weight", "rank": -1, "dtype": "float32",
         "global_shape": [8, 4], "shape": [4, 4], "offsets": [4, 0], "file": "rank-00001.bin",
         "offset": 0, "nbytes": 64, "crc32": 305419896}
old = dict(entry, key="norm.weight", global_shape=[4], shape=[4], file="rank-00000.bin", nbytes=16, dtype="bfloat16")
del old["offsets"]
old["row_offset"] = 0
meta = {"format": "ctitan-checkpoint", "version": 1, "step": 10, "model_only": False, "world_size": 2,
        "dp_degree": 2, "dp_rank_of": [0, 1], "config_hash": "0123456789abcdef",
        "config": "[job]\ndump_folder = \"x\"\n", "entries": [entry, old]}
put("checkpoint_metadata", "two_entries.json", json.dumps(meta, indent=1))
put("checkpoint_metadata", "no_entries.json", json.dumps(dict(meta, entries=[], model_only=True)))

# Token files: header "CTTOKS01", vocab size, reserved, then uint32 ids.
for name, ids in (("empty.bin", []), ("ten.bin", list(range(10))), ("big_ids.bin", [0, 299, 2**31, 2**32 - 1])):
    put("token_file", name, b"CTTOKS01" + struct.pack("<II", 300, 0) + struct.pack(f"<{len(ids)}I", *ids))

# metrics.jsonl: first byte is the resumed step, then rows as MetricsLogger writes them.
rows = "".join(json.dumps({"step": s, "loss": 5.0 - s / 10, "grad_norm": 1.5, "lr": 8e-4, "tps": 1234.5}) + "\n"
               for s in range(1, 11))
put("metrics_jsonl", "resume_at_5.jsonl", bytes([5]) + rows.encode())
put("metrics_jsonl", "torn_last_row.jsonl", bytes([20]) + rows.encode() + b'{"step": 11, "lo')

# Dataset documents: JSONL (with escapes and unicode) and strfile text.
docs = [{"text": " ".join(rng.choice(WORDS) for _ in range(8))} for _ in range(5)]
docs.append({"text": "tab\tquote\" \u00e9t\u00e9 \u4e2d", "id": 3})
put("jsonl_documents", "docs.jsonl", "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
put("jsonl_documents", "strfile.txt", "one saying\n%\nanother saying\nover two lines\n%\n")

# Configs: TOML, NUL, override words separated by NUL.
toml = """[job]
dump_folder = "./outputs/fuzz"
[model]
name = "llama3"
flavor = "debugmodel"
tokenizer_path = "./tok.model"
[optimizer]
lr = 8e-4
[training]
local_batch_size = 4
seq_len = 256
steps = 100
dataset = "text"
dataset_path = "./data"
[metrics]
log_freq = 10
"""
put("config", "plain.toml", toml)
put("config", "with_overrides.toml", toml + "\x00--training.steps\x00" + "20\x00--optimizer.lr=1e-3\x00--metrics.no_enable_tensorboard")
put("config", "overrides_only.toml", "\x00--training.seq_len\x00128\x00--parallelism.data_parallel_shard_degree\x00-1")


# safetensors: u64 header length, JSON header, data.
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


put("safetensors", "two_tensors.safetensors",
    safetensors({"a.weight": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                 "b.bias": ("BF16", [3], b"\x80\x3f\x00\x40\x40\x40")}, {"format": "pt"}))
put("safetensors", "scalar_and_empty.safetensors",
    safetensors({"s": ("I64", [], struct.pack("<q", 7)), "e": ("F16", [0, 3], b"")}))


# RPC wire (the format is in src/ctitan/rpc/wire.h and value_codec.h): the first byte is the
# number of tensors (0-4) in the table, then a request or a response: one seed per value tag, a
# nested call, each error response.
def rpc_value(tag, body=b""):
    return bytes([tag]) + body


def rpc_str(s):
    return struct.pack("<I", len(s)) + s


RPC_VALUES = {
    "none": rpc_value(0), "false": rpc_value(1), "true": rpc_value(2),
    "int": rpc_value(3, struct.pack("<q", -7)), "double": rpc_value(4, struct.pack("<d", 0.5)),
    "str": rpc_value(5, rpc_str(b"hello")), "tensor": rpc_value(6, struct.pack("<I", 1)),
    "list_int": rpc_value(7, bytes([1]) + struct.pack("<I", 2) + rpc_value(3, struct.pack("<q", 1)) * 2),
    "list_any": rpc_value(7, bytes([0]) + struct.pack("<I", 2) + rpc_value(0) + rpc_value(5, rpc_str(b"x"))),
    "tuple": rpc_value(8, struct.pack("<I", 2) + rpc_value(2) + rpc_value(6, struct.pack("<I", 0))),
    "dict_str": rpc_value(9, bytes([5]) + struct.pack("<I", 1) + rpc_value(5, rpc_str(b"w")) +
                          rpc_value(6, struct.pack("<I", 2))),
    "dict_tensor": rpc_value(9, bytes([4]) + struct.pack("<I", 1) + rpc_value(6, struct.pack("<I", 0)) +
                             rpc_value(6, struct.pack("<I", 3))),
    "rref": rpc_value(10, struct.pack("<hhqhqh", 1, 1, 5, 0, 9, 0)),
}


def rpc_request(name, args):
    return b"CTR1" + bytes([1]) + struct.pack("<H", len(name)) + name + rpc_value(8, struct.pack("<I", len(args)) + b"".join(args))


for label, value in RPC_VALUES.items():
    put("rpc_wire", f"request_{label}.bin", bytes([4]) + rpc_request(b"echo", [value]))
    put("rpc_wire", f"response_{label}.bin", bytes([4]) + b"CTR1" + bytes([0]) + value)
nested = RPC_VALUES["int"]
for _ in range(5):
    nested = rpc_value(7, bytes([0]) + struct.pack("<I", 2) + nested + RPC_VALUES["tuple"])
put("rpc_wire", "request_nested.bin", bytes([4]) + rpc_request(b"ps.push", [RPC_VALUES["int"], nested, RPC_VALUES["dict_str"]]))
for status, message in ((1, b"boom from worker1"), (2, b"nope"), (3, b"argument 1 expected Tensor, got int"),
                        (4, b"rpc: value of type Device cannot be sent")):
    put("rpc_wire", f"response_status_{status}.bin",
        bytes([0]) + b"CTR1" + bytes([status]) + struct.pack("<H", 7) + b"worker1" + rpc_str(message))

# Launcher environments, one value per variable of dist_env_fuzzer.cpp's kVariables, NUL-separated.
ENV_VARIABLES = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                 "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE"]


def env_seed(**values):
    return "\x00".join(values.get(name, "") for name in ENV_VARIABLES)


put("dist_env", "torchrun.env", env_seed(RANK="3", WORLD_SIZE="8", LOCAL_RANK="3", LOCAL_WORLD_SIZE="4", GROUP_RANK="0",
                                         MASTER_ADDR="10.0.0.1", MASTER_PORT="29500", TORCHELASTIC_RESTART_COUNT="1",
                                         TORCHELASTIC_USE_AGENT_STORE="True"))
put("dist_env", "slurm.env", env_seed(SLURM_PROCID="5", SLURM_NTASKS="16", SLURM_LOCALID="1",
                                      SLURM_NTASKS_PER_NODE="4", SLURM_NODEID="1", MASTER_PORT="12345"))
put("dist_env", "openmpi.env", env_seed(OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="2",
                                        OMPI_COMM_WORLD_LOCAL_RANK="1", OMPI_COMM_WORLD_LOCAL_SIZE="2"))
put("dist_env", "regress_local_world_size_0.env", env_seed(RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="0"))
