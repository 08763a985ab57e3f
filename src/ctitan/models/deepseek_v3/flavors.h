#pragma once
// DeepSeek-V3's registry entry: multi-head latent attention (low-rank keys and values, decoupled
// RoPE), the first layers dense, the rest mixtures of experts with a shared expert and
// sigmoid-scored, group-limited routing with auxiliary-loss-free balancing; shapes as
// torchtitan's deepseek_v3 flavors and DeepSeek's published config.json.
#include "ctitan/models/model_spec.h"

namespace ctitan::models::deepseek_v3 {

ModelSpec spec();

}  // namespace ctitan::models::deepseek_v3
