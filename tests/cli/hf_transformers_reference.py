"""Independent references for ctitan's HF export/import, from the real Hugging Face libraries.

Run by tests/cli/hf_transformers_test.cpp with the venv's Python (CTITAN_PYTHON). Subcommands:

  logits           --model DIR --ids 1,2,3 [--device cpu|cuda] [--out FILE]
      AutoModelForCausalLM.from_pretrained(DIR) (LlamaForCausalLM or Qwen3ForCausalLM, as
      config.json says) in float32 with eager attention; one forward over the
      ids. JSON: {"shape": [T, vocab], "logits": [[...] per position], "config": {...as read}}.
  greedy           --model DIR --ids 1,2,3 [4,5 ...] --n N [--out FILE]
      For each prompt, N greedy ids: argmax of a full (uncached) forward over prompt + ids so far,
      N times. No EOS stop, no generation_config: the same rule as `ctitan generate
      --temperature 0` without a tokenizer. JSON: {"runs": [{"prompt": [...], "ids": [...],
      "min_margin": smallest top-1 minus top-2 logit over the steps (how far each pick is from a
      tie)}, ...], "config": {...as read}}.
  read-safetensors --file F [F ...] [--out FILE]
      Opens each F with the `safetensors` library. JSON: {"files": [{"file": F, "metadata": {...},
      "tensors": {name: {"dtype": "F32", "shape": [...], "tensor_shape": [...] as loaded, "sum":
      float64 sum of the values, "wsum": the same with element i weighted by (i mod 7) + 1}}},
      ...]}.
  save-random      --dir DIR [--family llama|qwen3|qwen3_moe --dim 64 --layers 2 --heads 4 --kv-heads 2
                    --head-dim 0 --vocab 256 --ffn 256 --max-pos 64 --rope-theta 10000 --eps 1e-6
                    --experts 8 --top-k 2 --moe-ffn 32 --seed 0] [--tie] [--legacy-config]
      A random LlamaForCausalLM (or Qwen3ForCausalLM, or Qwen3MoeForCausalLM with --experts
      experts of --moe-ffn, top --top-k renormalised, or DeepseekV3ForCausalLM with those experts
      in 4 groups, a shared expert, a random selection bias, latent attention with --q-lora query
      rank; --head-dim 0: dim / heads) saved with save_pretrained(DIR, safe_serialization=True),
      which writes each expert apart.
      JSON: {"dir": DIR, "saved_tensors": [names in DIR's safetensors files, read back]}.
      --legacy-config rewrites config.json with the keys transformers 4.x wrote (top-level
      rope_theta, rope_scaling null, torch_dtype) instead of 5.x's rope_parameters / dtype.
  serve            --fd N
      Runs the subcommands above one after another in this process (tests/support/python_worker.h):
      torch and transformers are imported once per test program instead of once per call. Reads
      one JSON array of arguments per line from the socket at file descriptor N and answers each
      with one line, {"exit": status, "error": "Type: message" or ""}, after its result is written.
      Each request is seeded as a fresh process would be. Ends when the socket closes.

Results go to --out as one JSON object (and to stdout when --out is absent): the test harness
merges stdout and stderr, and library warnings must not corrupt the JSON. Errors exit non-zero
with one line on stderr.
"""

import os

# No network: everything is local files. Set before transformers is imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import random
import sys

import numpy as np
import torch


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parse_ids(text):
    return [int(x) for x in text.split(",") if x.strip()]


def emit(result, out_path):
    text = json.dumps(result)
    if out_path:
        tmp = out_path + ".partial"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, out_path)
    else:
        print(text, flush=True)


def load_model(model_dir):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    # A missing tensor would be silently random-initialised: that is a failure, not a reference.
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        sys.exit(f"hf_transformers_reference: {model_dir}: loading problems {problems}")
    model.eval()
    return model


def config_summary(model):
    c = model.config
    rope = getattr(c, "rope_parameters", None) or {}
    return {
        "rope_theta": rope.get("rope_theta", getattr(c, "rope_theta", None)),
        "rope_type": rope.get("rope_type"),
        "rms_norm_eps": c.rms_norm_eps,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "tie_word_embeddings": c.tie_word_embeddings,
        "architecture": type(model).__name__,
        "head_dim": getattr(c, "head_dim", None),
        "dtype": str(next(model.parameters()).dtype),
    }


def cmd_logits(args):
    model = load_model(args.model).to(args.device)
    ids = torch.tensor([parse_ids(args.ids)], dtype=torch.long, device=args.device)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0].cpu()  # (T, vocab)
    emit({"shape": list(logits.shape), "logits": logits.tolist(), "config": config_summary(model)}, args.out)


def greedy(model, prompt, n):
    # Not model.generate(): it stops at config.eos_token_id, which LlamaConfig defaults to 2 when
    # config.json has none (our tokenizer-less exports), and 2 is an ordinary id here.
    seq, new, margins = list(prompt), [], []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0, -1]
            top = torch.topk(logits, 2).values
            margins.append(float(top[0] - top[1]))
            nxt = int(torch.argmax(logits).item())
            new.append(nxt)
            seq.append(nxt)
    return {"prompt": list(prompt), "ids": new, "min_margin": min(margins, default=None)}


def cmd_greedy(args):
    model = load_model(args.model)
    runs = [greedy(model, parse_ids(ids), args.n) for ids in args.ids]
    emit({"runs": runs, "config": config_summary(model)}, args.out)


def read_safetensors(path):
    from safetensors import safe_open

    tensors = {}
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
        for name in f.keys():
            sl = f.get_slice(name)
            t = f.get_tensor(name)
            t64 = t.to(torch.float64)
            tensors[name] = {
                "dtype": sl.get_dtype(),
                "shape": list(sl.get_shape()),
                "tensor_shape": list(t.shape),
                "sum": float(t64.sum().item()),
                # Each element weighted by (flat index mod 7) + 1: misplaced rows change it.
                "wsum": float((t64.flatten() * (torch.arange(t64.numel(), dtype=torch.float64) % 7 + 1)).sum().item()),
            }
    return {"file": path, "metadata": metadata, "tensors": tensors}


def cmd_read_safetensors(args):
    emit({"files": [read_safetensors(path) for path in args.file]}, args.out)


def cmd_save_random(args):
    from transformers import (
        DeepseekV3Config,
        DeepseekV3ForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    seed_everything(args.seed)
    config_class, model_class = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
        "deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM),
    }[args.family]
    extra = {"head_dim": args.head_dim} if args.head_dim else {}
    if args.family == "qwen3_moe":
        extra.update(num_experts=args.experts, num_experts_per_tok=args.top_k, moe_intermediate_size=args.moe_ffn,
                     norm_topk_prob=True)
    if args.family == "deepseek_v3":
        # DeepSeek-V3's routing at a small size: 4 groups, the best 2, one shared expert, the
        # first layer dense; latent attention with a query latent too (--q-lora 0: none).
        extra = dict(n_routed_experts=args.experts, num_experts_per_tok=args.top_k, moe_intermediate_size=args.moe_ffn,
                     n_shared_experts=1, n_group=4, topk_group=2, routed_scaling_factor=2.5, first_k_dense_replace=1,
                     norm_topk_prob=True, kv_lora_rank=32, q_lora_rank=args.q_lora or None, qk_nope_head_dim=16,
                     qk_rope_head_dim=8, v_head_dim=16)
    config = config_class(
        **extra,
        hidden_size=args.dim,
        intermediate_size=args.ffn,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        vocab_size=args.vocab,
        max_position_embeddings=args.max_pos,
        rms_norm_eps=args.eps,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta},
        tie_word_embeddings=args.tie,
    )
    model = model_class(config)
    # HF's init (normal(0, 0.02), unit norms) gives near-uniform logits that a wrong rotation or
    # eps would barely move. O(1) activations instead: unit embeddings, fan-in scaled
    # projections, norm weights away from 1 (so a dropped or misplaced norm weight shows).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # a bias that changes some choices
                b.copy_(0.05 * torch.randn_like(b))
    model.save_pretrained(args.dir, safe_serialization=True)
    if args.legacy_config:
        path = os.path.join(args.dir, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope["rope_theta"]
        cfg["rope_scaling"] = None
        cfg["torch_dtype"] = cfg.pop("dtype", "float32")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
    files = sorted(f for f in os.listdir(args.dir) if f.endswith(".safetensors"))
    saved = sorted(n for f in files for n in read_safetensors(os.path.join(args.dir, f))["tensors"])
    emit({"dir": args.dir, "saved_tensors": saved}, args.out)


def run_request(parser, argv):
    """One subcommand, as main() would run it: (exit status, error text)."""
    try:
        args = parser.parse_args(argv)
        if args.command == "serve":
            return 2, "serve cannot be a request"
        seed_everything(getattr(args, "seed", 0))
        args.fn(args)
        return 0, ""
    except SystemExit as e:  # argparse's usage errors, and sys.exit("message") in a command
        if isinstance(e.code, int) or e.code is None:
            return e.code or 0, ""
        return 1, str(e.code)
    except Exception as e:  # a bug or a bad model: reported with the request, the worker goes on
        return 1, f"{type(e).__name__}: {e}"
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(parser, fd):
    import socket

    with socket.socket(fileno=fd) as sock, sock.makefile("r") as requests, sock.makefile("w") as replies:
        for line in requests:
            status, error = run_request(parser, json.loads(line))
            replies.write(json.dumps({"exit": status, "error": error}) + "\n")
            replies.flush()


def main():
    torch.set_num_threads(1)  # reproducible summation order, and the test machine is shared
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("logits")
    p.add_argument("--model", required=True)
    p.add_argument("--ids", required=True)
    p.add_argument("--device", default="cpu", help="cpu or cuda: where transformers computes")
    p.add_argument("--out")
    p.set_defaults(fn=cmd_logits)

    p = sub.add_parser("greedy")
    p.add_argument("--model", required=True)
    p.add_argument("--ids", required=True, nargs="+")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--out")
    p.set_defaults(fn=cmd_greedy)

    p = sub.add_parser("read-safetensors")
    p.add_argument("--file", required=True, nargs="+")
    p.add_argument("--out")
    p.set_defaults(fn=cmd_read_safetensors)

    p = sub.add_parser("save-random")
    p.add_argument("--dir", required=True)
    p.add_argument("--out")
    p.add_argument("--family", choices=["llama", "qwen3", "qwen3_moe", "deepseek_v3"], default="llama")
    p.add_argument("--q-lora", type=int, default=0)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--moe-ffn", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--head-dim", type=int, default=0)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--max-pos", type=int, default=64)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tie", action="store_true")
    p.add_argument("--legacy-config", action="store_true")
    p.set_defaults(fn=cmd_save_random)

    p = sub.add_parser("serve")
    p.add_argument("--fd", type=int, required=True)

    args = parser.parse_args()
    if args.command == "serve":
        serve(parser, args.fd)
        return
    seed_everything(getattr(args, "seed", 0))
    args.fn(args)


if __name__ == "__main__":
    main()
