#pragma once
// The link's bandwidth as the collectives see it, measured once at startup: the reference that
// metrics' "bandwidth use" divides by when [comm] link_gbytes_per_s is not configured.
#include <c10/core/Device.h>

#include <cstdint>

namespace ctitan::distributed {

class Communicator;

// Payload bytes per second of an fp32 all_gather_into_tensor whose output is `total_bytes`, over
// `group`, on `device`'s tensors (so over the transport training uses there: NCCL on a GPU): the
// best of `reps` timed runs after one warm-up, with nothing else running. On a GPU each run is
// timed from an idle device to an idle device. Collective: every member must call it.
double all_gather_bytes_per_second(Communicator& group, int64_t total_bytes = int64_t(64) << 20, int reps = 3,
                                   c10::Device device = c10::kCPU);

}  // namespace ctitan::distributed
