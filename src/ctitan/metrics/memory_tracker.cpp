#include "ctitan/metrics/memory_tracker.h"

#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <fstream>

namespace ctitan::metrics {
namespace {

std::atomic<int64_t> g_active{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_allocs{0};
std::atomic<bool> g_installed{false};

// Each allocation carries its size in a header just before the data. The data pointer must
// also be the DataPtr's context, because some libtorch code calls raw_allocate(), which
// asserts exactly that; a separate context object would crash there.
constexpr size_t kHeaderBytes = 64;  // keeps the data at the allocator's 64-byte alignment

void release(void* data) {
  char* base = static_cast<char*>(data) - kHeaderBytes;
  int64_t bytes;
  std::memcpy(&bytes, base, sizeof(bytes));
  g_active.fetch_sub(bytes, std::memory_order_relaxed);
  std::free(base);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* raw = nullptr;
    if (posix_memalign(&raw, kHeaderBytes, n + kHeaderBytes) != 0) {
      throw c10::Error({__func__, __FILE__, uint32_t(__LINE__)},
                       "out of memory allocating " + std::to_string(n) + " bytes");
    }
    char* base = static_cast<char*>(raw);
    int64_t bytes = int64_t(n);
    std::memcpy(base, &bytes, sizeof(bytes));
    void* data = base + kHeaderBytes;
    int64_t now = g_active.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    for (int64_t peak = g_peak.load(); now > peak && !g_peak.compare_exchange_weak(peak, now);) {
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

void install_memory_tracker() {
  if (g_installed.exchange(true)) return;
  // Leaked on purpose: tensors may outlive every static destructor.
  static auto* allocator = new CountingAllocator();
  c10::SetCPUAllocator(allocator, /*priority=*/100);
}

bool memory_tracker_installed() { return g_installed.load(); }

MemoryStats memory_stats() { return {g_active.load(), g_peak.load(), g_allocs.load()}; }

void reset_peak_memory() { g_peak.store(g_active.load()); }

int64_t minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_minflt);
}

int64_t physical_memory_bytes() { return int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)); }

int64_t resident_set_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * int64_t(sysconf(_SC_PAGESIZE));
}

}  // namespace ctitan::metrics
