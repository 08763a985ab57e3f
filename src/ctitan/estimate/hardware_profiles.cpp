#include "ctitan/estimate/hardware_profiles.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "ctitan/common/byte_units.h"
#include "ctitan/common/error.h"
#include "ctitan/metrics/memory_tracker.h"

namespace ctitan::estimate {
namespace {

constexpr double kGB = 1e9;

// The share of the bf16 peak that matmuls reach in a training step, fitted once: the value at
// which this estimator reproduces torchtitan's Llama 3.1 8B run on 8 H100s (FSDP, local batch 2,
// seq 8192, selective op AC, eager, no float8: 5,762 tokens/s/GPU; torchtitan
// benchmarks/llama3_h100_202412_torchtitan.md, Table 1). Every other published figure the tests
// compare with is out of sample. It is lower than what a lone large GEMM reaches (~0.7 on H100):
// those machines ran at a 500 W power limit (their clocks, hence their real peak, sit between
// SXM and PCIe/NVL: the doc's footnote 2), and a step's matmuls include small, skinny and
// causally masked (attention) ones.
constexpr double kH100AchievableFraction = 0.4124;

std::map<std::string, HardwareProfile> profiles() {
  std::map<std::string, HardwareProfile> table;
  HardwareProfile h100;
  h100.name = "h100";
  h100.description = "NVIDIA H100 SXM5 80 GB: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3, NVLink 450 GB/s, 400 Gb/s NIC per GPU";
  h100.memory_bytes = int64_t(80 * kGiB);
  h100.peak_flops = 989e12;
  h100.float8_speedup = 2.0;
  // Fitted on the 500 W machines below; a 700 W SXM probably does better (give --achievable-fraction).
  h100.achievable_fraction = kH100AchievableFraction;
  h100.memory_bytes_per_s = 3.35e12;
  h100.intra_node_bytes_per_s = 450 * kGB;  // NVLink 4: 900 GB/s both directions
  h100.inter_node_bytes_per_s = 50 * kGB;   // one 400 Gb/s RDMA NIC per GPU
  h100.devices_per_node = 8;
  table[h100.name] = h100;

  // The machines of torchtitan's published H100 runs (Grand Teton: 96 GB HBM2e, 2.4 TB/s, 500 W
  // power limit, 8 GPUs per host on NVLink, 400 Gb/s RDMA per GPU), as that doc describes them.
  HardwareProfile grand_teton = h100;
  grand_teton.name = "h100-96gb";
  grand_teton.description = "NVIDIA H100 96 GB HBM2e at 500 W (torchtitan's benchmark hosts): 989 TFLOP/s bf16 "
                            "dense (SXM figure, as torchtitan's MFU), 2.4 TB/s, NVLink 450 GB/s, 400 Gb/s NIC per GPU";
  grand_teton.memory_bytes = int64_t(96 * kGB);  // HBM2e "96GB": decimal gigabytes
  grand_teton.memory_bytes_per_s = 2.4e12;
  table[grand_teton.name] = grand_teton;

  // This machine, running ctitan's fused CPU kernels. Ranks share its memory; peak FLOP/s is left
  // at 0 for the caller to measure (metrics/peak_flops: the same probe MFU divides by), which is
  // why the achievable fraction is 1. The bandwidths are rough defaults for one socket and for
  // Gloo over loopback TCP; give the flags (or comm.link_gbytes_per_s) for better ones.
  HardwareProfile cpu;
  cpu.name = "cpu";
  cpu.description = "this machine's CPU (ctitan's fused kernels; peak from the GEMM probe)";
  cpu.is_gpu = false;
  cpu.memory_bytes = metrics::physical_memory_bytes();
  cpu.peak_flops = 0;
  cpu.float8_speedup = 1.0;
  cpu.achievable_fraction = 1.0;
  cpu.memory_bytes_per_s = 10 * kGB;
  cpu.intra_node_bytes_per_s = 2 * kGB;
  cpu.inter_node_bytes_per_s = 1 * kGB;
  cpu.devices_per_node = 1;
  table[cpu.name] = cpu;
  return table;
}

}  // namespace

std::vector<std::string> hardware_profile_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : profiles()) names.push_back(name);
  return names;
}

HardwareProfile hardware_profile(const std::string& name) {
  auto table = profiles();
  auto it = table.find(name);
  if (it == table.end()) {
    throw InputError(fmt::format("--hardware '{}' is unknown (known: {}; or give --memory-gib, --peak-tflops, "
                                 "--intra-node-gbps and --inter-node-gbps)",
                                 name, fmt::join(hardware_profile_names(), ", ")),
                     2);
  }
  return it->second;
}

}  // namespace ctitan::estimate
