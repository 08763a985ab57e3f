#include "ctitan/metrics/memory_tracker.h"

#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

namespace ctitan::metrics {
namespace {

std::atomic<int64_t> g_active{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_allocs{0};
std::atomic<bool> g_installed{false};
std::array<std::atomic<int64_t>, kMemoryTagCount> g_tagged{};
std::atomic<int64_t> g_tagged_total{0};
std::atomic<int64_t> g_tagged_high{0};
// Taken only when an allocation raises the peak, so that the peak and the tagged bytes copied
// with it belong to the same moment.
std::mutex g_peak_mutex;
std::array<int64_t, kMemoryTagCount> g_peak_tagged{};  // guarded by g_peak_mutex
thread_local MemoryTag t_tag = MemoryTag::kNone;

// Each allocation carries its size and tag in a header just before the data. The data pointer
// must also be the DataPtr's context, because some libtorch code calls raw_allocate(), which
// asserts exactly that; a separate context object would crash there.
constexpr size_t kHeaderBytes = 64;  // keeps the data at the allocator's 64-byte alignment
constexpr size_t kTagOffset = sizeof(int64_t);

int64_t header_bytes(const char* base) {
  int64_t bytes;
  std::memcpy(&bytes, base, sizeof(bytes));
  return bytes;
}

void count_tagged(MemoryTag tag, int64_t bytes) {
  if (tag == MemoryTag::kNone) return;
  g_tagged[size_t(tag)].fetch_add(bytes, std::memory_order_relaxed);
  const int64_t total = g_tagged_total.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  for (int64_t high = g_tagged_high.load(); total > high && !g_tagged_high.compare_exchange_weak(high, total);) {
  }
}

std::array<int64_t, kMemoryTagCount> tagged_now() {
  std::array<int64_t, kMemoryTagCount> out{};
  for (size_t i = 0; i < kMemoryTagCount; ++i) out[i] = g_tagged[i].load(std::memory_order_relaxed);
  return out;
}

void release(void* data) {
  char* base = static_cast<char*>(data) - kHeaderBytes;
  const int64_t bytes = header_bytes(base);
  count_tagged(MemoryTag(base[kTagOffset]), -bytes);
  g_active.fetch_sub(bytes, std::memory_order_relaxed);
  std::free(base);
}

void raise_peak(int64_t now) {
  if (now <= g_peak.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_peak_mutex);
  if (now <= g_peak.load(std::memory_order_relaxed)) return;
  g_peak.store(now, std::memory_order_relaxed);
  g_peak_tagged = tagged_now();
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
    const int64_t bytes = int64_t(n);
    std::memcpy(base, &bytes, sizeof(bytes));
    base[kTagOffset] = char(t_tag);
    void* data = base + kHeaderBytes;
    count_tagged(t_tag, bytes);
    const int64_t now = g_active.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    raise_peak(now);
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

MemoryStats memory_stats() {
  MemoryStats s;
  s.active_bytes = g_active.load();
  s.alloc_count = g_allocs.load();
  s.tagged_bytes = tagged_now();
  std::lock_guard<std::mutex> lock(g_peak_mutex);
  s.peak_bytes = g_peak.load();
  s.peak_tagged_bytes = g_peak_tagged;
  s.tagged_high_water_bytes = g_tagged_high.load();
  return s;
}

void reset_peak_memory() {
  std::lock_guard<std::mutex> lock(g_peak_mutex);
  g_peak.store(g_active.load());
  g_peak_tagged = tagged_now();
  g_tagged_high.store(g_tagged_total.load());
}

MemoryTagScope::MemoryTagScope(MemoryTag tag) : previous_(t_tag) { t_tag = tag; }
MemoryTagScope::~MemoryTagScope() { t_tag = previous_; }

void tag_storage(const at::Tensor& t, MemoryTag tag) {
  if (!t.defined() || !t.has_storage()) return;
  const auto& data_ptr = t.storage().data_ptr();
  if (data_ptr.get_deleter() != &release || data_ptr.get() == nullptr) return;
  // Only the tensor's holder re-tags it, and it holds a reference: no release can race with this.
  char* base = static_cast<char*>(data_ptr.get()) - kHeaderBytes;
  const auto old = MemoryTag(base[kTagOffset]);
  if (old == tag) return;
  const int64_t bytes = header_bytes(base);
  base[kTagOffset] = char(tag);
  count_tagged(old, -bytes);  // first, so that moving bytes between tags never raises the high water
  count_tagged(tag, bytes);
}

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
