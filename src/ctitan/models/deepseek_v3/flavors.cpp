#include "ctitan/models/deepseek_v3/flavors.h"

#include "ctitan/models/deepseek_v3/hf_adapter.h"

namespace ctitan::models::deepseek_v3 {

ModelSpec spec() {
  ModelSpec s;
  s.name = "deepseek_v3";
  // Every flavor: latent keys and values of rank 512, per head 128 + 64 (RoPE) for queries and
  // keys and 128 for values, RoPE θ 1e4 without YaRN (torchtitan applies it only past 4096
  // positions), RMSNorm eps 1e-6 (DeepSeek's config.json; torchtitan's args say 1e-5), untied.
  ModelArgs base;
  base.family = s.name;
  base.kv_lora_rank = 512;
  base.qk_nope_head_dim = 128;
  base.qk_rope_head_dim = 64;
  base.v_head_dim = 128;
  base.rope_theta = 10000;
  base.norm_eps = 1e-6;
  base.max_seq_len = 4096;
  base.moe.score_func = RouterScore::kSigmoid;
  base.moe.route_norm = true;

  // Small enough for CPU tests, with every DeepSeek-V3 feature: a dense first layer, latent
  // attention, a shared expert, sigmoid scores, group-limited routing (8 experts in 4 groups, the
  // best 2), renormalised and scaled weights. Smaller than torchtitan's debugmodel (kv rank 512,
  // 16 heads) and routed as V3 rather than by softmax, so that transformers' DeepseekV3 computes
  // the same model.
  ModelArgs debug = base;
  debug.dim = 256; debug.n_layers = 4; debug.n_heads = 4; debug.vocab_size = 2048; debug.ffn_dim = 512;
  debug.kv_lora_rank = 64; debug.qk_nope_head_dim = 32; debug.qk_rope_head_dim = 16; debug.v_head_dim = 32;
  debug.moe.num_experts = 8; debug.moe.top_k = 2; debug.moe.hidden_dim = 128; debug.moe.num_shared_experts = 1;
  debug.moe.num_expert_groups = 4; debug.moe.num_limited_groups = 2; debug.moe.route_scale = 2.5;
  debug.moe.n_dense_layers = 1;

  // torchtitan's 16B (DeepSeek-V2-Lite's shapes): softmax routing, which HF's DeepseekV3 cannot express.
  ModelArgs m16b = base;
  m16b.dim = 2048; m16b.n_layers = 27; m16b.n_heads = 16; m16b.vocab_size = 102400; m16b.ffn_dim = 10944;
  m16b.moe.num_experts = 64; m16b.moe.top_k = 6; m16b.moe.hidden_dim = 1408; m16b.moe.num_shared_experts = 2;
  m16b.moe.n_dense_layers = 1; m16b.moe.score_func = RouterScore::kSoftmax; m16b.moe.route_norm = false;

  ModelArgs m671b = base;
  m671b.dim = 7168; m671b.n_layers = 61; m671b.n_heads = 128; m671b.vocab_size = 129280; m671b.ffn_dim = 18432;
  m671b.q_lora_rank = 1536;
  m671b.moe.num_experts = 256; m671b.moe.top_k = 8; m671b.moe.hidden_dim = 2048; m671b.moe.num_shared_experts = 1;
  m671b.moe.num_expert_groups = 8; m671b.moe.num_limited_groups = 4; m671b.moe.route_scale = 2.5;
  m671b.moe.n_dense_layers = 3;

  s.flavors = {{"debugmodel", debug}, {"16B", m16b}, {"671B", m671b}};
  s.hf_base = base;
  s.parallelize_plan = decoder_plan;  // the shared decoder's, latent attention's heads split under TP
  s.hf = {"DeepseekV3ForCausalLM", "deepseek_v3", {{"rope_interleave", true}, {"topk_method", "noaux_tc"},
                                                  {"moe_layer_freq", 1}, {"pretraining_tp", 1}},
          write_hf_config, read_hf_config, /*expert_bias=*/true, /*permute_rope_rows=*/false};
  return s;
}

}  // namespace ctitan::models::deepseek_v3
