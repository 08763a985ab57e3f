#pragma once
// Synchronized housekeeping, ctitan's counterpart of torchtitan's gc_freq. Work that pauses a
// process (returning freed heap to the OS, releasing allocator caches, flushing logs, checking
// for leaks) runs only at the boundary after every `freq`-th step. The decision depends on the
// step number alone, so every rank of a job pauses at the same boundary and no collective ever
// waits on a rank that chose to pause mid-step.
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>

namespace ctitan::train {

struct HousekeepingOptions {
  int64_t freq = 50;
  bool check_leaks = false;
  // Live bytes may grow by at most this much over the steady value. 0: the step loop allocates
  // nothing that survives a step, so any growth is a leak.
  int64_t leak_tolerance_bytes = 0;
};

// Makes housekeeping the only point where freed heap memory goes back to the OS. By default glibc
// serves every request above 32 MiB (logits, their gradient, the embedding gradient) with a fresh
// mmap and trims the heap top whenever it frees enough, so each step maps and zeroes the same
// memory again: page faults inside the step, at moments that differ between ranks. After this,
// memory freed in a step is reused by the next one, and Housekeeper::maybe_run's malloc_trim
// returns it at the synchronized boundary. glibc only; elsewhere it does nothing.
void retain_freed_memory_between_housekeeping();

class Housekeeper {
 public:
  // `flush_logs` is called on every run; may be empty. Applies
  // retain_freed_memory_between_housekeeping().
  Housekeeper(HousekeepingOptions options, std::function<void()> flush_logs);

  bool due(int64_t step) const { return step % options_.freq == 0; }
  // Call at every step boundary; runs the housekeeping when due. Returns whether it ran.
  // With check_leaks, the first run records the steady live-byte count; later runs throw a
  // LeakError naming the growth if they rose.
  bool maybe_run(int64_t step);
  std::optional<int64_t> steady_bytes() const { return steady_bytes_; }

 private:
  HousekeepingOptions options_;
  std::function<void()> flush_logs_;
  std::optional<int64_t> steady_bytes_;
  int64_t steady_step_ = 0;
};

// Thrown by the leak check.
struct LeakError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ctitan::train
