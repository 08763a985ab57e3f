"""Cross-check of `ctitan generate` against an independent HF-convention Llama in PyTorch.

Writes random LlamaForCausalLM weights in HF layout (safetensors written by hand: struct + json),
greedy-decodes with HF's rotate_half RoPE here, runs `ctitan generate --temperature 0` on the same
directory, and compares the ids. Usage: ~/.cache/ctitan/venv/bin/python bench/hf_generate_reference.py CTITAN_BIN DIR
"""
import json, math, struct, subprocess, sys, time
import torch

bin_path, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
dim, layers, heads, kv_heads, ffn, vocab, max_pos, theta, eps = 256, 6, 16, 4, 768, 2048, 512, 500000.0, 1e-5
hd = dim // heads
W = {"model.embed_tokens.weight": torch.randn(vocab, dim), "model.norm.weight": 1 + 0.1 * torch.randn(dim),
     "lm_head.weight": torch.randn(vocab, dim) / dim ** 0.5}
for i in range(layers):
    p = f"model.layers.{i}."
    for n, shape in [("self_attn.q_proj", (heads * hd, dim)), ("self_attn.k_proj", (kv_heads * hd, dim)),
                     ("self_attn.v_proj", (kv_heads * hd, dim)), ("self_attn.o_proj", (dim, heads * hd)),
                     ("mlp.gate_proj", (ffn, dim)), ("mlp.up_proj", (ffn, dim)), ("mlp.down_proj", (dim, ffn))]:
        W[p + n + ".weight"] = torch.randn(shape) / math.sqrt(shape[1])
    W[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(dim)
    W[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(dim)

import os
os.makedirs(out, exist_ok=True)
header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
for name, t in W.items():
    b = t.contiguous().numpy().tobytes()
    header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
with open(f"{out}/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": dim, "intermediate_size": ffn,
           "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": kv_heads,
           "rms_norm_eps": eps, "rope_theta": theta, "vocab_size": vocab, "max_position_embeddings": max_pos,
           "torch_dtype": "float32", "tie_word_embeddings": False, "hidden_act": "silu"}, open(f"{out}/config.json", "w"))

def rms(x, w): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
def rope(x):  # (T, H, hd), HF rotate_half convention
    ang = torch.outer(torch.arange(x.shape[0]).float(), inv)
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
    return x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin
def forward(ids):
    x = W["model.embed_tokens.weight"][ids]
    T = len(ids)
    for i in range(layers):
        p = f"model.layers.{i}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = rope((h @ W[p + "self_attn.q_proj.weight"].T).view(T, heads, hd))
        k = rope((h @ W[p + "self_attn.k_proj.weight"].T).view(T, kv_heads, hd)).repeat_interleave(heads // kv_heads, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, kv_heads, hd).repeat_interleave(heads // kv_heads, 1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + torch.full((T, T), float("-inf")).triu(1)
        a = torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, dim)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
        x = x + g @ W[p + "mlp.down_proj.weight"].T
    return rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T

prompt, n = [5, 17, 99, 1000, 3], int(os.environ.get("N", "64"))
ids = list(prompt)
with torch.no_grad():
    for _ in range(n):
        ids.append(int(forward(torch.tensor(ids))[-1].argmax()))
ref = ids[len(prompt):]
t0 = time.time()
r = subprocess.run([bin_path, "generate", "--checkpoint", out, "--prompt-ids", ",".join(map(str, prompt)),
                    "--max-new-tokens", str(n), "--temperature", "0", "--json"], capture_output=True, text=True)
dt = time.time() - t0
got = json.loads(r.stdout.strip().splitlines()[-1])["ids"]
match = sum(a == b for a, b in zip(ref, got))
print(f"reference vs ctitan greedy: {match}/{n} ids equal; first mismatch at "
      f"{next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), None)}; ctitan generate took {dt:.2f}s")
sys.exit(0 if got == ref else 1)
