#pragma once
// Every entry point sets the intra-op thread count itself: libtorch builds differ in their default
// (some start at one thread), and ranks sharing a machine must split the cores.
namespace ctitan {

// CTITAN_NUM_THREADS, else OMP_NUM_THREADS, else the number of cores. Returns the count set.
int configure_threads();

}  // namespace ctitan
