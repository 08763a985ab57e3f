#!/usr/bin/env python3
"""FSDP scaling on one machine: 2 ranks x 1 thread (FSDP over Gloo on loopback) against
1 process x 2 threads, at the same global batch, model and data. Target: ratio >= 0.9.

Usage: bench/fsdp_scaling.py [--ctitan build/bin/ctitan] [--steps 30] [--dtype float32|bfloat16]
The figure to read is `ratio` = FSDP global tokens/s / single-process tokens/s.
"""
import scaling_lib as lib

if __name__ == "__main__":
    lib.scaling_main("fsdp_scaling", "FSDP", lib.degrees(1, 2), "bfloat16", target=0.9)
