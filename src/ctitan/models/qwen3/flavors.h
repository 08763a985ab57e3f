#pragma once
// Qwen3 (dense)'s registry entry: the decoder with QK-norm, head_dim apart from dim / n_heads,
// RoPE θ 1e6 and, in the small flavors, tied embeddings; shapes as Qwen's published config.json.
#include "ctitan/models/model_spec.h"

namespace ctitan::models::qwen3 {

ModelSpec spec();

}  // namespace ctitan::models::qwen3
