#pragma once
// Qwen3-MoE's registry entry: Qwen3's attention (QK-norm, head_dim 128, RoPE θ 1e6) with every
// feed-forward a mixture of experts: softmax router, top-8 of 128 experts renormalised, no shared
// expert; shapes as Qwen's published config.json.
#include "ctitan/models/model_spec.h"

namespace ctitan::models::qwen3_moe {

ModelSpec spec();

}  // namespace ctitan::models::qwen3_moe
