#include "ctitan/train/housekeeping.h"

#include <fmt/format.h>
#include <malloc.h>

#include <limits>

#include "ctitan/metrics/memory_tracker.h"

namespace ctitan::train {

void retain_freed_memory_between_housekeeping() {
#ifdef __GLIBC__
  mallopt(M_MMAP_MAX, 0);  // large blocks come from the heap, where freed ones can be reused
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());  // no automatic trim of the heap top
#endif
}

Housekeeper::Housekeeper(HousekeepingOptions options, std::function<void()> flush_logs)
    : options_(options), flush_logs_(std::move(flush_logs)) {
  retain_freed_memory_between_housekeeping();
}

bool Housekeeper::maybe_run(int64_t step) {
  if (!due(step)) return false;
  if (flush_logs_) flush_logs_();
  // glibc keeps freed arenas mapped; returning them keeps RSS honest over long runs. This can
  // take milliseconds, which is why it only ever runs here.
  malloc_trim(0);
  // A CUDA build would also release the caching allocator's unused blocks here.
  if (options_.check_leaks) {
    int64_t live = metrics::memory_stats().active_bytes;
    if (!steady_bytes_) {
      steady_bytes_ = live;
      steady_step_ = step;
    } else if (live > *steady_bytes_ + options_.leak_tolerance_bytes) {
      throw LeakError(fmt::format("leak check failed at step {}: live tensor bytes grew by {} "
                                  "(from {} at step {} to {})",
                                  step, live - *steady_bytes_, *steady_bytes_, steady_step_, live));
    }
  }
  return true;
}

}  // namespace ctitan::train
