#pragma once
// Parameter counts and training FLOPs per token, computed from the model shape alone.
#include <cstdint>

#include "ctitan/models/common/model_args.h"

namespace ctitan::models {

struct ParamCount {
  int64_t total = 0;
  int64_t active = 0;     // what one token computes with: total, less the routed experts it skips
  int64_t embedding = 0;  // tok_embeddings only; the output layer does matmuls and counts as compute
  int64_t output = 0;     // the output layer's own weight; 0 when tied to tok_embeddings
};

ParamCount count_params(const ModelArgs& args);
// count_params' total as a double, for the estimate's arithmetic.
double parameter_count(const ModelArgs& args);

// torchtitan's formula: 6·N_non_embedding + 12·L·H·Q·T, N counting the active parameters (a
// MoE layer's top_k experts). The first term is forward (2) plus backward (4) FLOPs per weight;
// the second is the QK^T and PV matmuls, without causal savings.
double flops_per_token(const ModelArgs& args, int64_t seq_len);

}  // namespace ctitan::models
