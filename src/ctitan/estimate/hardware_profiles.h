#pragma once
// What `ctitan estimate` needs to know about a device: memory, peak FLOP/s, the fraction of it
// matmuls reach in practice, memory and link bandwidths. Built-in profiles, or any field from flags.
#include <cstdint>
#include <string>
#include <vector>

namespace ctitan::estimate {

struct HardwareProfile {
  std::string name;                 // "h100", "cpu", ... as given to --hardware
  std::string description;          // one line, printed with the estimate
  bool is_gpu = true;               // false: ctitan's fused CPU kernels run (ops/), not PyTorch's GPU ops
  int64_t memory_bytes = 0;         // per device (per rank on a CPU: the machine's share)
  double peak_flops = 0;            // dense matmul FLOP/s in the compute dtype (bf16 on GPUs): the MFU denominator
  double float8_speedup = 2.0;      // float8 matmul peak / bf16 peak (H100: 1979 / 989 TFLOP/s)
  // Share of the peak that the training step's matmuls (and attention) reach. Not a datasheet
  // number: see each profile for where it comes from.
  double achievable_fraction = 1.0;
  double memory_bytes_per_s = 0;    // device memory bandwidth: element-wise (non-matmul) ops are bound by it
  double intra_node_bytes_per_s = 0;  // per device, one direction: collectives within a node
  double inter_node_bytes_per_s = 0;  // per device, one direction: collectives spanning nodes
  int64_t devices_per_node = 8;
};

// The built-in profile named `name`; an InputError naming --hardware and the known names if none.
HardwareProfile hardware_profile(const std::string& name);
std::vector<std::string> hardware_profile_names();

}  // namespace ctitan::estimate
