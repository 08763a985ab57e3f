#!/usr/bin/env python3
"""DDP scaling on one machine: 2 ranks x 1 thread (DDP over Gloo on loopback) against
1 process x 2 threads, at the same global batch, model and data. Prints the throughput ratio.

Usage: bench/ddp_scaling.py [--ctitan build/bin/ctitan] [--steps 30] [--dtype float32|bfloat16]
The figure to read is `ratio` = DDP global tokens/s / single-process tokens/s.
"""
import scaling_lib as lib

if __name__ == "__main__":
    lib.scaling_main("ddp_scaling", "DDP", lib.degrees(2, 1), "float32")
