#pragma once
// libtorch 1.13 starts with one intra-op thread, so every entry point sets the count itself.
namespace ctitan {

// CTITAN_NUM_THREADS, else OMP_NUM_THREADS, else the number of cores. Returns the count set.
int configure_threads();

}  // namespace ctitan
