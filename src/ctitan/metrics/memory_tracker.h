#pragma once
// Live tensor bytes, counted exactly by wrapping the CPU allocator: every CPU tensor's storage
// passes through it. These figures are what metrics.jsonl reports as memory, never estimates.
//
// Tags say what some of those bytes are for, so the peak can be broken down as it happened:
// a parallelism wrapper tags what it holds only for a while (FSDP's gathered parameters, its
// unsharded gradients, its communication buffers), and when a new peak is reached the tracker
// copies the tagged counters. Untagged bytes are everything else: model state, activations and
// the temporaries of the ops.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace ctitan::metrics {

enum class MemoryTag : uint8_t {
  kNone = 0,
  kUnshardedParams,  // FSDP: a group's gathered parameters, between unshard and reshard
  kUnshardedGrads,   // FSDP: gradients of the gathered parameters, until copied for reduction
  kCommBuffers,      // FSDP: all-gather and reduce-scatter inputs, outputs and their scratch
};
constexpr size_t kMemoryTagCount = 4;

struct MemoryStats {
  int64_t active_bytes = 0;  // bytes in live CPU tensor storages now
  int64_t peak_bytes = 0;    // the most active_bytes reached since the last reset_peak()
  int64_t alloc_count = 0;   // allocations since process start (churn indicator)
  // Bytes per MemoryTag live now, and live at the moment peak_bytes was reached. Index kNone is 0.
  std::array<int64_t, kMemoryTagCount> tagged_bytes{};
  std::array<int64_t, kMemoryTagCount> peak_tagged_bytes{};
  // The most bytes live under tags (all together) at any moment since the last reset_peak_memory().
  int64_t tagged_high_water_bytes = 0;
};

// Installs the counting allocator once per process; later calls do nothing. Tensors allocated
// before installation are not counted, so call it before building the model.
void install_memory_tracker();
bool memory_tracker_installed();
MemoryStats memory_stats();
// Starts a new peak window (MetricsProcessor: one per logged step).
void reset_peak_memory();

// CPU allocations made by this thread while a scope lives carry `tag` (scopes nest).
class MemoryTagScope {
 public:
  explicit MemoryTagScope(MemoryTag tag);
  ~MemoryTagScope();
  MemoryTagScope(const MemoryTagScope&) = delete;
  MemoryTagScope& operator=(const MemoryTagScope&) = delete;

 private:
  MemoryTag previous_;
};

// Counts `t`'s whole storage under `tag` from now on, until it is freed or tagged again. Does
// nothing for storages the tracker did not allocate (other devices, tensors from before install).
void tag_storage(const at::Tensor& t, MemoryTag tag);

// Physical memory of this machine (sysconf): the capacity CPU ranks share.
int64_t physical_memory_bytes();

// Resident set size of this process, from /proc/self/statm.
int64_t resident_set_bytes();

// Minor page faults of this process since it started (getrusage). Each one is the kernel mapping
// and zeroing a fresh page: memory returned to the OS and touched again costs one per 4 KiB.
int64_t minor_page_faults();

}  // namespace ctitan::metrics
