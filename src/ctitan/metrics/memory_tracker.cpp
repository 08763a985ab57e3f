#include "ctitan/metrics/memory_tracker.h"

#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

namespace ctitan::metrics {
namespace {

std::atomic<int64_t> g_active{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_allocs{0};
std::atomic<bool> g_installed{false};

// What each counted allocation carries to its deleter: the real allocation and its size.
struct CountedAllocation {
  c10::DataPtr inner;
  int64_t bytes;
};

void release(void* context) {
  auto* allocation = static_cast<CountedAllocation*>(context);
  g_active.fetch_sub(allocation->bytes, std::memory_order_relaxed);
  delete allocation;  // frees the real storage through its own deleter
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    auto device = inner.device();
    auto* allocation = new CountedAllocation{std::move(inner), int64_t(n)};
    int64_t now = g_active.fetch_add(int64_t(n), std::memory_order_relaxed) + int64_t(n);
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    for (int64_t peak = g_peak.load(); now > peak && !g_peak.compare_exchange_weak(peak, now);) {
    }
    return {data, allocation, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

 private:
  c10::Allocator* base_;
};

}  // namespace

void install_memory_tracker() {
  if (g_installed.exchange(true)) return;
  // Leaked on purpose: tensors may outlive every static destructor.
  static auto* allocator = new CountingAllocator(c10::GetCPUAllocator());
  c10::SetCPUAllocator(allocator, /*priority=*/100);
}

bool memory_tracker_installed() { return g_installed.load(); }

MemoryStats memory_stats() { return {g_active.load(), g_peak.load(), g_allocs.load()}; }

void reset_peak_memory() { g_peak.store(g_active.load()); }

int64_t resident_set_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * int64_t(sysconf(_SC_PAGESIZE));
}

}  // namespace ctitan::metrics
