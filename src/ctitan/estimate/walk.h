#pragma once
// What job_estimate's two memory walks share: the ledger they write every allocation and free
// into, and their entry points (cpu_walk.cpp, gpu_walk.cpp), which
// estimate_memory calls. Internal to estimate/.
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "ctitan/estimate/job_estimate.h"

namespace ctitan::estimate::detail {

// The ledger: live bytes by category, and the moment of the peak.
enum Cat { kParams, kGrads, kOptim, kActs, kComm, kOther, kNumCats };

class Ledger {
 public:
  void at(std::string where) { where_ = std::move(where); }
  void add(Cat c, int64_t bytes) {
    live_[c] += bytes;
    total_ += bytes;
    if (total_ > peak_total_) {
      peak_total_ = total_;
      peak_ = live_;
      peak_where_ = where_;
    }
  }
  void free(Cat c, int64_t bytes) { add(c, -bytes); }
  // A tensor changes role without a new allocation (a reduce output becomes the gradient).
  void move(Cat from, Cat to, int64_t bytes) {
    live_[from] -= bytes;
    live_[to] += bytes;
  }
  MemoryEstimate result() const {
    MemoryEstimate m;
    m.params_bytes = peak_[kParams];
    m.grads_bytes = peak_[kGrads];
    m.optimizer_bytes = peak_[kOptim];
    m.activations_bytes = peak_[kActs];
    m.comm_buffers_bytes = peak_[kComm];
    m.other_bytes = peak_[kOther];
    m.peak_bytes = peak_total_;
    m.peak_at = peak_where_;
    return m;
  }

 private:
  std::array<int64_t, kNumCats> live_{}, peak_{};
  int64_t total_ = 0, peak_total_ = 0;
  std::string where_ = "start of step", peak_where_;
};

// One walk through a step: the ledger's peak and its split (the state_* fields left at 0), and
// the elements of the fp32 master weights the walked rank holds.
struct WalkResult {
  MemoryEstimate memory;
  double state_numel = 0;
};

// ctitan's own step on a CPU, tensor by tensor (cpu_walk.cpp).
WalkResult walk_ctitan_cpu(const JobShape& job);
// torchtitan's step on a GPU, block by block, for pipeline rank `pp_rank` (gpu_walk.cpp).
WalkResult walk_torchtitan_gpu(const JobShape& job, int64_t pp_rank);

}  // namespace ctitan::estimate::detail
