#include "ctitan/models/common/parallelize_plan.h"

namespace ctitan::models {

std::vector<std::string> PipelineLayout::modules(int64_t n_layers) const {
  std::vector<std::string> out = before_blocks;
  for (int64_t i = 0; i < n_layers; ++i) out.push_back(block(i));
  out.insert(out.end(), after_blocks.begin(), after_blocks.end());
  return out;
}

ParallelizePlan decoder_plan(const ModelArgs& args) {
  ParallelizePlan plan;
  plan.tp.sublayers = {{"attention", {"wq", "wk", "wv"}, "wo"}, {"feed_forward", {"w1", "w3"}, "w2"}};
  plan.tp.replicated = {"attention_norm.weight", "ffn_norm.weight"};
  if (args.latent_attention()) {
    // Heads split: the queries' last projection and the latent's up-projection column-wise, wo
    // row-wise; the latents (wkv_a, wq_a) and their norms whole on every tp rank, their
    // gradients (each rank's heads' share) summed over tp.
    plan.tp.sublayers.front() = {"attention", {args.q_lora_rank > 0 ? "wq_b" : "wq", "wkv_b"}, "wo"};
    plan.tp.replicated.insert(plan.tp.replicated.end(), {"attention.wkv_a.weight", "attention.kv_norm.weight",
                                                         "attention.wq_a.weight", "attention.q_norm.weight"});
  }
  if (args.qk_norm) plan.tp.replicated.insert(plan.tp.replicated.end(), {"attention.q_norm.weight", "attention.k_norm.weight"});
  if (args.moe.num_experts > 0) {
    plan.tp.replicated.insert(plan.tp.replicated.end(), {"moe.router.gate.weight", "moe.experts.w1", "moe.experts.w2",
                                                         "moe.experts.w3", "moe.shared_experts.w1.weight",
                                                         "moe.shared_experts.w2.weight", "moe.shared_experts.w3.weight"});
  }

  // A pipeline split keeps the head's slot ("output") even when tied: the trainer refuses a tied
  // head under PP, since its weight would live on the first stage.
  plan.pipeline = {{"tok_embeddings"}, "layers", {"norm", "output"}};

  // A tied head multiplies by the embedding's weight at the end of forward and first thing in
  // backward: the embedding stays gathered after forward, as torchtitan's root group does, and its
  // reduce-scatter (at the end of backward, its input being token ids) sees both uses.
  plan.fsdp_units.push_back(
      {{"tok_embeddings"}, args.tie_word_embeddings ? FreeAfterForward::kNever : FreeAfterForward::kPerPolicy});
  for (int64_t i = 0; i < args.n_layers; ++i) {
    plan.fsdp_units.push_back({{plan.pipeline.block(i)}, FreeAfterForward::kPerPolicy});
    // Gathered when the router has chosen (inside the block's forward), after the block's unit.
    if (args.is_moe_layer(i)) plan.fsdp_units.push_back({{plan.pipeline.block(i) + ".moe.experts"}, FreeAfterForward::kPerPolicy, true});
    plan.checkpoint_units.push_back(plan.pipeline.block(i));
  }
  // norm and output are one unit, as torchtitan's; a pipeline split between them
  // (module_fqns_per_model_part) leaves each stage its own. A tied head has no module of its own.
  FsdpUnit head{{"norm"}, FreeAfterForward::kOnlyIfAlways};
  if (!args.tie_word_embeddings) head.modules.push_back("output");
  plan.fsdp_units.push_back(head);
  return plan;
}

std::string describe(const TpPlan& plan) {
  std::string columns, rows;
  for (const auto& sub : plan.sublayers) {
    std::string names;
    for (const auto& c : sub.column_wise) names += (names.empty() ? "" : "/") + c;
    columns += (columns.empty() ? "" : ", ") + sub.module + "." + names;
    rows += (rows.empty() ? "" : ", ") + sub.module + "." + sub.row_wise;
  }
  return "column-wise " + columns + "; row-wise " + rows;
}

}  // namespace ctitan::models
