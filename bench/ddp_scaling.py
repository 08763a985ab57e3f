#!/usr/bin/env python3
"""DDP scaling on one machine: 2 ranks x 1 thread (DDP over Gloo on loopback) against
1 process x 2 threads, at the same global batch, model and data, for ctitan and for PyTorch 2.x
(torch.nn.parallel.DistributedDataParallel on Gloo, launched by torchrun), in the same run.

Usage: bench/ddp_scaling.py [--ctitan build/bin/ctitan] [--python ~/.cache/ctitan/venv/bin/python]
                            [--steps 30] [--dtype float32|bfloat16] [--baseline-only]
The figures to read: ctitan/PyTorch per layout, and each side's 2 ranks / 1 process ratio.
"""
import scaling_lib as lib

if __name__ == "__main__":
    lib.scaling_main("ddp_scaling", "DDP", lib.degrees(2, 1), "ddp", "float32")
