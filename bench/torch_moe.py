"""The PyTorch 2.x Qwen3-MoE that bench/moe.py trains as its baseline: ctitan's qwen3_moe
(src/ctitan/models/common/moe.cpp, models/qwen3_moe/) written as people write it today, the same
computation step for step:

- attention: QK-norm (nn.RMSNorm over head_dim) before RoPE, adjacent-pair RoPE (complex
  freqs_cis, as torchtitan), SDPA with GQA;
- MoE: a Linear router, softmax over the experts in fp32, top-k renormalised, the tokens sorted
  by expert (stable argsort), each expert a SwiGLU over its contiguous rows: one matmul per
  expert (the default, as ctitan's CPU path) or torch._grouped_mm (--grouped-mm), the outputs
  weighted by the scores in fp32 and summed.

Balancing's selection bias is not modelled: it adds one (E) vector to the scores and changes no cost.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_llama as tl


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, head_dim, eps):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.wq = nn.Linear(dim, n_heads * head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * head_dim, bias=False)
        self.wo = nn.Linear(n_heads * head_dim, dim, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=eps)

    def forward(self, x, freqs_cis):
        bs, seq, _ = x.shape
        xq = self.q_norm(self.wq(x).view(bs, seq, self.n_heads, self.head_dim))
        xk = self.k_norm(self.wk(x).view(bs, seq, self.n_kv_heads, self.head_dim))
        xv = self.wv(x).view(bs, seq, self.n_kv_heads, self.head_dim)
        xq, xk = tl.apply_rotary_emb(xq, xk, freqs_cis)
        q, k, v = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(out.transpose(1, 2).reshape(bs, seq, -1))


class MoE(nn.Module):
    def __init__(self, dim, experts, top_k, hidden, grouped_mm):
        super().__init__()
        self.experts, self.top_k, self.grouped_mm = experts, top_k, grouped_mm
        self.gate = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.w2 = nn.Parameter(torch.empty(experts, dim, hidden))
        self.w3 = nn.Parameter(torch.empty(experts, hidden, dim))

    def expert_matmul(self, x, w, counts):
        # x (N, in) grouped by expert, w (E, out, in) -> (N, out)
        if self.grouped_mm:
            offsets = torch.cumsum(counts, 0).to(torch.int32)
            return torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)
        sizes = counts.tolist()
        return torch.cat([rows @ w[e].t() for e, rows in enumerate(x.split(sizes)) if sizes[e]])

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (N, dim)
        scores = self.gate(flat).float().softmax(-1)  # (N, E)
        weights, chosen = scores.topk(self.top_k, dim=-1)  # (N, k)
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        chosen = chosen.reshape(-1)
        counts = torch.bincount(chosen, minlength=self.experts)
        order = torch.argsort(chosen, stable=True)
        routed = flat[order // self.top_k]  # (N k, dim) grouped by expert
        h = F.silu(self.expert_matmul(routed, self.w1, counts)) * self.expert_matmul(routed, self.w3, counts)
        out = self.expert_matmul(h, self.w2, counts)
        per_choice = torch.empty_like(out).index_copy_(0, order, out).view(-1, self.top_k, shape[-1])
        return (per_choice.float() * weights.unsqueeze(-1)).sum(1).to(x.dtype).view(shape)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.attention = Attention(a["dim"], a["n_heads"], a["n_kv_heads"], a["head_dim"], a["eps"])
        self.moe = MoE(a["dim"], a["experts"], a["top_k"], a["moe_hidden"], a["grouped_mm"])
        self.attention_norm = nn.RMSNorm(a["dim"], eps=a["eps"])
        self.ffn_norm = nn.RMSNorm(a["dim"], eps=a["eps"])

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.moe(self.ffn_norm(h))


class Qwen3Moe(nn.Module):
    """a: dim, n_layers, n_heads, n_kv_heads, head_dim, vocab, experts, top_k, moe_hidden, eps,
    rope_theta, max_seq_len, grouped_mm."""

    def __init__(self, a):
        super().__init__()
        self.tok_embeddings = nn.Embedding(a["vocab"], a["dim"])
        self.layers = nn.ModuleList(Block(a) for _ in range(a["n_layers"]))
        self.norm = nn.RMSNorm(a["dim"], eps=a["eps"])
        self.output = nn.Linear(a["dim"], a["vocab"], bias=False)
        freqs_cis = tl.precompute_freqs_cis(a["head_dim"], a["max_seq_len"], a["rope_theta"])
        self.register_buffer("freqs_cis", freqs_cis, persistent=False)
        self.register_buffer("freqs_real", torch.view_as_real(freqs_cis), persistent=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if not name.endswith("norm.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        table = self.freqs_real if torch.compiler.is_compiling() else self.freqs_cis
        freqs_cis = table[: tokens.shape[1]]
        for layer in self.layers:
            h = layer(h, freqs_cis)
        return self.output(self.norm(h))
