#include "ctitan/models/common/model_args.h"

namespace ctitan::models {

int64_t ModelArgs::ffn_hidden_dim() const {
  if (ffn_dim > 0) return ffn_dim;
  // Llama's SwiGLU keeps the parameter count of a 4·dim MLP: 2/3 of 4·dim per matrix, three matrices.
  auto hidden = static_cast<int64_t>(2 * (4 * dim) / 3);
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

}  // namespace ctitan::models
