"""The PyTorch 2.x Llama 3 that every Python baseline trains: the model, its init, and one
training step's pieces (loss, clipping, optimizer), written as people write them today.

Attention is F.scaled_dot_product_attention(is_causal=True), with enable_gqa when n_kv_heads <
n_heads; norms are nn.RMSNorm; RoPE rotates adjacent pairs through complex freqs_cis as in
torchtitan; AdamW is fused. Shapes and ModelArgs defaults are ctitan's (src/ctitan/models/common/, src/ctitan/models/llama3/).
Parallelism (DDP, FSDP2) and torch.compile are applied to the model from outside.
"""
import dataclasses
import sys

import torch
import torch.utils.checkpoint
import torch.nn as nn
import torch.nn.functional as F

# enable_gqa (2.5), nn.RMSNorm (2.4), get_total_norm / clip_grads_with_norm_ (2.6).
MIN_TORCH = (2, 6)


def require_torch2(script):
    """Exits with one line naming the interpreter when its torch is too old for these baselines."""
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if version < MIN_TORCH:
        sys.exit(f"{script}: needs PyTorch >= {'.'.join(map(str, MIN_TORCH))}, but {sys.executable} has "
                 f"{torch.__version__}; run it with the venv's python (~/.cache/ctitan/venv/bin/python, "
                 f"made by scripts/setup_venv.sh)")


@dataclasses.dataclass
class ModelArgs:
    dim: int
    n_layers: int
    n_heads: int
    vocab_size: int
    n_kv_heads: int = 0               # 0 = n_heads (no GQA)
    multiple_of: int = 256            # FFN hidden size is rounded up to this
    ffn_dim_multiplier: float = None  # scales the 8/3 * dim FFN size before rounding
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    max_seq_len: int = 2048           # RoPE table length

    def __post_init__(self):
        if self.n_kv_heads <= 0:
            self.n_kv_heads = self.n_heads


# ctitan's flavors (src/ctitan/models/llama3/flavors.cpp) that the Python benchmarks train.
FLAVORS = {
    "debugmodel": ModelArgs(dim=256, n_layers=6, n_heads=16, vocab_size=2048),
    "134M": ModelArgs(dim=768, n_layers=12, n_heads=12, vocab_size=32000),
}


def precompute_freqs_cis(head_dim, seq_len, theta):
    """(seq_len, head_dim / 2) complex64: e^(i * t * theta^(-2k / head_dim)). Complex, as torchtitan's:
    FSDP2's MixedPrecisionPolicy casts floating-point block inputs to bf16 but leaves complex ones."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary_emb(xq, xk, freqs_cis):
    """xq, xk: (B, T, H, D); each adjacent pair (2i, 2i+1) is rotated by angle (t, i), in fp32.
    freqs_cis: (T, D / 2) complex, multiplied as complex numbers (torchtitan's eager form), or the
    same table as real (T, D / 2, 2) (cos, sin), rotated in reals: the form for torch.compile,
    because inductor has no complex codegen (it warns and falls back to eager kernels)."""
    if freqs_cis.is_complex():
        fc = freqs_cis.view(1, xq.shape[1], 1, xq.shape[-1] // 2)  # broadcast over batch and heads
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        return (torch.view_as_real(xq_ * fc).flatten(3).type_as(xq),
                torch.view_as_real(xk_ * fc).flatten(3).type_as(xk))
    fc = freqs_cis.view(1, xq.shape[1], 1, xq.shape[-1] // 2, 2)
    cos, sin = fc[..., 0], fc[..., 1]

    def rotate(x):
        x = x.float().unflatten(-1, (-1, 2))
        x0, x1 = x[..., 0], x[..., 1]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(3)

    return rotate(xq).type_as(xq), rotate(xk).type_as(xk)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, freqs_cis):
        bs, seq, _ = x.shape
        xq = self.wq(x).view(bs, seq, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bs, seq, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bs, seq, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        # (B, T, H, D) -> (B, H, T, D): SDPA runs per head; enable_gqa shares each kv head among
        # n_heads / n_kv_heads query heads without materialising the repeat.
        q, k, v = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(out.transpose(1, 2).reshape(bs, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, args):
        super().__init__()
        # Llama's SwiGLU keeps the parameter count of a 4 * dim MLP: 2/3 of it per matrix.
        hidden = int(2 * 4 * args.dim / 3)
        if args.ffn_dim_multiplier:
            hidden = int(args.ffn_dim_multiplier * hidden)
        hidden = args.multiple_of * ((hidden + args.multiple_of - 1) // args.multiple_of)
        self.w1 = nn.Linear(args.dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args)
        self.attention_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.checkpoint_layers = False  # set True for full activation checkpointing
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        # Not persistent: derived from args, never checkpointed. freqs_real is a real view of the same
        # memory, for compiled graphs (see apply_rotary_emb).
        freqs_cis = precompute_freqs_cis(args.dim // args.n_heads, args.max_seq_len, args.rope_theta)
        self.register_buffer("freqs_cis", freqs_cis, persistent=False)
        self.register_buffer("freqs_real", torch.view_as_real(freqs_cis), persistent=False)
        self.init_weights()

    def init_weights(self):
        # The baseline's historical init (N(0, 0.02) everywhere but the norms), kept so that
        # figures stay comparable across baseline versions. Throughput does not depend on it.
        with torch.no_grad():
            for name, p in self.named_parameters():
                if not name.endswith("norm.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)  # (B, T, dim)
        table = self.freqs_real if torch.compiler.is_compiling() else self.freqs_cis
        freqs_cis = table[: tokens.shape[1]]
        for layer in self.layers:
            if self.checkpoint_layers and torch.is_grad_enabled():
                # Full activation checkpointing per block, as torchtitan's mode = "full".
                h = torch.utils.checkpoint.checkpoint(layer, h, freqs_cis, use_reentrant=False)
            else:
                h = layer(h, freqs_cis)
        return self.output(self.norm(h))  # (B, T, vocab_size)


def loss_fn(logits, labels):
    """Mean token cross-entropy, computed in fp32 whatever the logits' dtype."""
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def clip_grad_norm_(params, max_norm):
    """Global-L2-norm clipping that also works on FSDP2's sharded (DTensor) gradients: the norm
    of the local shards is a partial sum until full_tensor() all-reduces it (torchtitan's way)."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=True)
    return total


def build_adamw(params, lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
    """ctitan's AdamW defaults (config/job_config.h), fused. Returns (optimizer, implementation):
    'fused', or 'foreach' with a note on stderr if this torch has no fused AdamW for CPU."""
    params = list(params)
    try:
        optimizer = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
        return optimizer, "fused"
    except (RuntimeError, ValueError) as e:
        print(f"note: torch.optim.AdamW(fused=True) is unavailable here ({e}); using foreach=True",
              file=sys.stderr)
        optimizer = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      foreach=True)
        return optimizer, "foreach"


def count_params(model):
    return sum(p.numel() for p in model.parameters())

