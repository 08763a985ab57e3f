#!/usr/bin/env python3
"""FSDP scaling on one machine: 2 ranks x 1 thread (FSDP over Gloo on loopback) against
1 process x 2 threads, at the same global batch, model and data, for ctitan and for PyTorch 2.x
(FSDP2 fully_shard per block then root, bf16 MixedPrecisionPolicy, Gloo, launched by torchrun),
in the same run. ctitan's target: 2 ranks / 1 process >= 0.9.

Usage: bench/fsdp_scaling.py [--ctitan build/bin/ctitan] [--python ~/.cache/ctitan/venv/bin/python]
                             [--steps 30] [--dtype float32|bfloat16] [--baseline-only]
The figures to read: ctitan/PyTorch per layout, and each side's 2 ranks / 1 process ratio.
"""
import scaling_lib as lib

if __name__ == "__main__":
    lib.scaling_main("fsdp_scaling", "FSDP", lib.degrees(1, 2), "fsdp", "bfloat16", target=0.9)
