#pragma once
// What fully_shard takes besides the modules: the groups it shards and reduces over, and its
// mixed-precision policy.
#include <torch/torch.h>

#include <memory>

namespace ctitan::distributed {
class Communicator;
}

namespace ctitan::parallel::fsdp {

struct MeshGroups {
  std::shared_ptr<distributed::Communicator> shard;      // parameters are sharded over these ranks
  std::shared_ptr<distributed::Communicator> replicate;  // HSDP only: replicas of the same shard; null for FSDP
};

struct MixedPrecisionPolicy {
  torch::ScalarType param_dtype = torch::kFloat;   // dtype of the all-gather and of compute
  torch::ScalarType reduce_dtype = torch::kFloat;  // dtype of gradient reduction; master shards stay fp32
};

}  // namespace ctitan::parallel::fsdp
