#include "ctitan/distributed/bandwidth_probe.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "ctitan/distributed/communicator.h"

namespace ctitan::distributed {

double all_gather_bytes_per_second(Communicator& group, int64_t total_bytes, int reps, c10::Device device) {
  const int64_t per_rank = std::max<int64_t>(1, total_bytes / 4 / group.size());
  auto input = torch::ones({per_rank}, torch::TensorOptions().device(device));
  auto output = torch::empty({per_rank * group.size()}, torch::TensorOptions().device(device));
  // NCCL's wait() only orders the stream: synchronize the device to time the transfer itself.
  auto idle = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  group.all_gather_into_tensor(output, input);  // warm-up: connections, buffers
  idle();
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    group.all_gather_into_tensor(output, input);
    idle();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(output.nbytes()) / seconds);
  }
  return best;
}

}  // namespace ctitan::distributed
