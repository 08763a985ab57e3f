#!/usr/bin/env python3
"""PyTorch eager Llama 3 training-throughput baseline for ctitan's benchmark.

Plain idiomatic eager PyTorch (targets PyTorch 1.13: no SDPA, attention is
written out by hand). Prints exactly one JSON line to stdout.
"""
import argparse
import inspect
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def precompute_freqs_cis(head_dim, seq_len, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    t = torch.arange(seq_len, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64 (seq, head_dim/2)


def apply_rotary_emb(xq, xk, freqs_cis):
    # xq: (bs, seq, n_heads, head_dim); adjacent pairs (2i, 2i+1) are complex numbers.
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    bs, seq, n_kv, hd = x.shape
    return x[:, :, :, None, :].expand(bs, seq, n_kv, n_rep, hd).reshape(bs, seq, n_kv * n_rep, hd)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, freqs_cis, mask):
        bs, seq, _ = x.shape
        xq = self.wq(x).view(bs, seq, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bs, seq, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bs, seq, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        xk = repeat_kv(xk, self.n_rep)
        xv = repeat_kv(xv, self.n_rep)
        q = xq.transpose(1, 2)  # (bs, n_heads, seq, head_dim)
        k = xk.transpose(1, 2)
        v = xv.transpose(1, 2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = F.softmax(scores.float(), dim=-1).type_as(q)
        out = torch.matmul(probs, v)
        out = out.transpose(1, 2).contiguous().view(bs, seq, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim, multiple_of, ffn_dim_multiplier):
        super().__init__()
        hidden = int(2 * 4 * dim / 3)
        if ffn_dim_multiplier:
            hidden = int(ffn_dim_multiplier * hidden)
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args.dim, args.n_heads, args.n_kv_heads)
        self.feed_forward = FeedForward(args.dim, args.multiple_of, args.ffn_dim_multiplier)
        self.attention_norm = RMSNorm(args.dim)
        self.ffn_norm = RMSNorm(args.dim)

    def forward(self, x, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        head_dim = args.dim // args.n_heads
        self.register_buffer(
            "freqs_cis", precompute_freqs_cis(head_dim, args.seq_len, args.rope_theta), persistent=False)
        mask = torch.triu(torch.ones(args.seq_len, args.seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, tokens):
        seq = tokens.shape[1]
        freqs_cis = self.freqs_cis[:seq]
        mask = self.mask[:seq, :seq]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, freqs_cis, mask)
        return self.output(self.norm(h))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--n-layers", type=int, required=True)
    p.add_argument("--n-heads", type=int, required=True)
    p.add_argument("--n-kv-heads", type=int, default=None)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--multiple-of", type=int, default=256)
    p.add_argument("--ffn-dim-multiplier", type=float, default=None)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.n_kv_heads is None:
        args.n_kv_heads = args.n_heads
    if args.dim % args.n_heads or args.n_heads % args.n_kv_heads:
        p.error("dim must be divisible by n_heads and n_heads by n_kv_heads")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    return args


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model = Transformer(args)
    model.train()
    params = [p for p in model.parameters()]
    n_params = sum(p.numel() for p in params)

    opt_kwargs = dict(lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if "foreach" in inspect.signature(torch.optim.AdamW.__init__).parameters:
        opt_kwargs["foreach"] = True
    optimizer = torch.optim.AdamW(params, **opt_kwargs)

    use_bf16 = args.dtype == "bf16"

    def step():
        tokens = torch.randint(0, args.vocab_size, (args.batch, args.seq_len))
        labels = torch.randint(0, args.vocab_size, (args.batch, args.seq_len))
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(tokens)
        loss = F.cross_entropy(logits.float().view(-1, args.vocab_size), labels.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return loss.item()

    for _ in range(args.warmup):
        step()

    loss = float("nan")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    elapsed = time.perf_counter() - t0

    tokens = args.batch * args.seq_len * args.steps
    result = {
        "tps": tokens / elapsed,
        "step_s": elapsed / args.steps,
        "loss": loss,
        "params": n_params,
        "threads": args.threads,
        "dtype": args.dtype,
    }
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
