// bench/collectives: all_reduce, all_gather_into_tensor and reduce_scatter_tensor on fp32 buffers
// of 4 KB .. 256 MB (powers of 4), against the same collectives of libtorch 2.x's own Gloo backend
// (`_allgather_base`, `_reduce_scatter_base`), which decides whether ctitan keeps its own
// algorithms (gloo_backend.cpp) or uses upstream's: "gain" = upstream time / ctitan time.
// Run one process per rank, like any ctitan job:
//   for r in 0 1 2 3; do RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611
//     build/bin/collectives & done; wait        (one line in a shell)
// Options: --max-mb M (largest buffer, default 256), --min-kb K (default 4).
// Figures as nccl-tests defines them: size = the full buffer (the output of all_gather, the input
// of reduce_scatter), algbw = size / time, busbw = algbw * 2(N-1)/N for all_reduce and
// algbw * (N-1)/N for all_gather and reduce_scatter. Time = the slowest rank's mean per call, best
// of 3 rounds.
#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <string>

#include "ctitan/common/threads.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/gloo_group.h"
#include "ctitan/distributed/store.h"
#include "ctitan/train/housekeeping.h"

using namespace ctitan;
using distributed::Communicator;
using distributed::ReduceOp;
using Clock = std::chrono::steady_clock;

namespace {

// Few calls for big buffers, many for small: a 4-rank run of every size stays within ~3 minutes
// on 2 cores. (A fixed count would spend minutes at 256 MB or measure noise at 4 KB.)
int iterations_for(int64_t bytes) {
  return int(std::clamp<int64_t>((int64_t(64) << 20) / bytes, 3, 200));
}

// Mean seconds per call on the slowest rank, after one warm-up call.
double time_it(Communicator& comm, int iters, const std::function<void()>& call) {
  call();
  comm.barrier();
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) call();
  auto elapsed = torch::tensor({std::chrono::duration<double>(Clock::now() - start).count() / iters}, torch::kDouble);
  comm.all_reduce(elapsed, ReduceOp::kMax);
  return elapsed.item<double>();
}

std::string size_text(int64_t bytes) {
  if (bytes >= (1 << 20)) return fmt::format("{} MB", bytes >> 20);
  return fmt::format("{} KB", bytes >> 10);
}

struct Row {
  double seconds;
  double algbw, busbw;  // GB/s (1e9 bytes)
};

Row row(int64_t bytes, double seconds, double bus_factor) {
  double algbw = bytes / seconds / 1e9;
  return {seconds, algbw, algbw * bus_factor};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_bytes = int64_t(256) << 20, min_bytes = int64_t(4) << 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--max-mb")) max_bytes = int64_t(std::atof(argv[i + 1]) * (1 << 20));
    if (!std::strcmp(argv[i], "--min-kb")) min_bytes = int64_t(std::atof(argv[i + 1]) * (1 << 10));
  }
  try {
    // As in a ctitan job (the trainer's Housekeeper sets it): freed blocks stay in the heap, so a
    // collective's fresh receive buffer is not a fresh mapping each call. Both sides get it.
    train::retain_freed_memory_between_housekeeping();
    int threads = configure_threads();
    auto env = distributed::read_dist_env();
    auto store = distributed::connect_store(env, std::chrono::seconds(60));
    auto comm = Communicator::create(store, "bench", env.rank, env.world_size, std::chrono::seconds(300));
    auto& gloo = *comm->gloo_backend();  // upstream's own Gloo algorithms, the baseline
    const int N = comm->size();
    const double ring = double(N - 1) / N;
    bool root = env.rank == 0;
    if (root) {
      fmt::print("collectives bench: {} ranks, fp32, Gloo over {}, {} intra-op thread(s) per rank\n", N,
                 distributed::default_bind_host(), threads);
      fmt::print("{:>8} | {:>9} {:>7} {:>7} | {:>9} {:>7} {:>7} {:>9} {:>7} {:>6} | {:>9} {:>7} {:>7} {:>9} {:>7} {:>6}\n",
                 "size", "all_reduce", "algbw", "busbw", "all_gather", "algbw", "busbw", "upstream", "busbw",
                 "gain", "reduce_sc", "algbw", "busbw", "upstream", "busbw", "gain");
      fmt::print("{:>8} | {:>9} {:>7} {:>7} | {:>9} {:>7} {:>7} {:>9} {:>7} {:>6} | {:>9} {:>7} {:>7} {:>9} {:>7} {:>6}\n",
                 "", "ms", "GB/s", "GB/s", "ms", "GB/s", "GB/s", "ms", "GB/s", "", "ms", "GB/s", "GB/s", "ms", "GB/s", "");
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      const int64_t total = bytes / 4, n = total / N;  // fp32 elements: full buffer, one shard
      const int64_t full = n * N;
      const int iters = std::max(1, iterations_for(bytes) / 3);  // per round
      auto big = torch::ones({full});
      auto shard = torch::ones({n});

      // Five series, each timed in 3 rounds interleaved with the others; the best round counts.
      // The machine is shared (builds, tests): the minimum is the most repeatable statistic.
      std::vector<std::function<void()>> calls = {
          [&] { comm->all_reduce(big, ReduceOp::kSum); },
          [&] { comm->all_gather_into_tensor(big, shard); },
          [&] { gloo._allgather_base(big, shard)->wait(); },  // upstream Gloo's all_gather_into_tensor
          [&] { comm->reduce_scatter_tensor(shard, big, ReduceOp::kSum); },
          [&] { gloo._reduce_scatter_base(shard, big)->wait(); },  // upstream Gloo's reduce_scatter_tensor
      };
      std::vector<double> best(calls.size(), 1e30);
      for (int round = 0; round < 3; ++round) {
        for (size_t k = 0; k < calls.size(); ++k) best[k] = std::min(best[k], time_it(*comm, iters, calls[k]));
      }
      auto ar = row(full * 4, best[0], 2 * ring);
      auto ag = row(full * 4, best[1], ring), ag_base = row(full * 4, best[2], ring);
      auto rs = row(full * 4, best[3], ring), rs_base = row(full * 4, best[4], ring);

      if (root) {
        fmt::print("{:>8} | {:>9.3f} {:>7.2f} {:>7.2f} | {:>9.3f} {:>7.2f} {:>7.2f} {:>9.3f} {:>7.2f} {:>5.2f}x | "
                   "{:>9.3f} {:>7.2f} {:>7.2f} {:>9.3f} {:>7.2f} {:>5.2f}x\n",
                   size_text(bytes), ar.seconds * 1e3, ar.algbw, ar.busbw, ag.seconds * 1e3, ag.algbw, ag.busbw,
                   ag_base.seconds * 1e3, ag_base.busbw, ag_base.seconds / ag.seconds, rs.seconds * 1e3, rs.algbw,
                   rs.busbw, rs_base.seconds * 1e3, rs_base.busbw, rs_base.seconds / rs.seconds);
        std::fflush(stdout);
      }
    }
    comm->barrier();
  } catch (const std::exception& e) {
    std::string what = e.what();
    fmt::print(stderr, "collectives: {}\n", what.substr(0, what.find('\n')));
    return 1;
  }
  return 0;
}
