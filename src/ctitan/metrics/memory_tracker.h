#pragma once
// Live tensor bytes, counted exactly by wrapping the CPU allocator: every CPU tensor's storage
// passes through it. These figures are what metrics.jsonl reports as memory, never estimates.
#include <cstdint>

namespace ctitan::metrics {

struct MemoryStats {
  int64_t active_bytes = 0;  // bytes in live CPU tensor storages now
  int64_t peak_bytes = 0;    // the most active_bytes reached since the last reset_peak()
  int64_t alloc_count = 0;   // allocations since process start (churn indicator)
};

// Installs the counting allocator once per process; later calls do nothing. Tensors allocated
// before installation are not counted, so call it before building the model.
void install_memory_tracker();
bool memory_tracker_installed();
MemoryStats memory_stats();
void reset_peak_memory();

// Physical memory of this machine (sysconf): the capacity CPU ranks share.
int64_t physical_memory_bytes();

// Resident set size of this process, from /proc/self/statm.
int64_t resident_set_bytes();

// Minor page faults of this process since it started (getrusage). Each one is the kernel mapping
// and zeroing a fresh page: memory returned to the OS and touched again costs one per 4 KiB.
int64_t minor_page_faults();

}  // namespace ctitan::metrics
