#pragma once
// The parameters a decoder with `args` has, by torchtitan FQN, with their shapes: what a state
// dict must hold to load into it (checkpoint/hf, cli/model_source).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ctitan/models/common/model_args.h"

namespace ctitan::models {

std::map<std::string, std::vector<int64_t>> parameter_shapes(const ModelArgs& args);

// The model's saved state that is not trained: each MoE layer's expert_bias (fp32), moved by
// load balancing (parallel/moe_balance.h). Empty for a dense model.
std::map<std::string, std::vector<int64_t>> buffer_shapes(const ModelArgs& args);

}  // namespace ctitan::models
