#pragma once
// A family's parallelize plan, as the part of torchtitan's parallelize_fn and pipelining_fn that
// depends on the model: which modules of a block split how under tensor parallelism, which
// modules FSDP shards as one unit, which activation checkpointing recomputes, and the modules a
// pipeline split places before and after the blocks. Data only: parallel/ applies it, so the
// family names the modules of its blocks and units, and parallel/ names none of them.
#include <string>
#include <vector>

#include "ctitan/models/common/model_args.h"

namespace ctitan::models {

// A sub-module of a block whose input is gathered on the sequence and whose output is
// reduce-scattered back onto it (sequence parallel), with its projections sliced in between.
struct TpSublayer {
  std::string module;                    // the block's child, e.g. "attention"; a block without it
                                         // (a MoE layer's absent feed_forward) skips the entry
  std::vector<std::string> column_wise;  // its Linear children split by output rows, in call order ("wq", "wk", "wv")
  std::string row_wise;                  // the Linear child split by input columns ("wo")
};

// Tensor parallelism per block, as torchtitan's per-block layer plan (ColwiseParallel on wq,
// RowwiseParallel on wo, ...). The decoder's own entry points (tok_embeddings, norm, output) are
// the same for every family and are not in the plan.
struct TpPlan {
  std::vector<TpSublayer> sublayers;    // in the order the block calls them
  // Parameters (by path in the block, e.g. "ffn_norm.weight") every tp rank holds whole and
  // computes gradients for from its own share of the sequence: the norms, the QK-norms (which act
  // on whole heads), and a MoE layer's router and experts, which route each rank's own tokens. A
  // block without one of them skips it.
  std::vector<std::string> replicated;
};

// When an FSDP unit frees its gathered parameters after forward.
enum class FreeAfterForward {
  kPerPolicy,     // as parallelism.fsdp_reshard_after_forward says (the blocks)
  kOnlyIfAlways,  // backward gathers it again at once (the last unit): only under "always"
  kNever,         // used again at the end of forward (an embedding the head reads): never
};

// Modules FSDP gathers, frees and reduce-scatters as one group, as one fully_shard call.
// A unit may nest inside another's module (a MoE layer's experts inside its block, as torchtitan
// shards moe.experts apart): the inner unit owns its parameters, the outer one the rest.
struct FsdpUnit {
  std::vector<std::string> modules;  // FQNs in forward order, e.g. {"norm", "output"}
  FreeAfterForward free_after_forward = FreeAfterForward::kPerPolicy;
  // Routed experts: sharded over the ranks that hold the same experts (efsdp under expert
  // parallelism; the whole FSDP group without it).
  bool experts = false;
};

// The modules a pipeline split places around the blocks, as generate_llm_fqn_per_model_part's
// names: the first stage opens with `before_blocks`, the last closes with `after_blocks`.
struct PipelineLayout {
  std::vector<std::string> before_blocks;  // {"tok_embeddings"}
  std::string blocks;                      // "layers": block i is "layers.i"
  std::vector<std::string> after_blocks;   // {"norm", "output"}

  std::string block(int64_t i) const { return blocks + "." + std::to_string(i); }
  // Every module in forward order: before_blocks, the n_layers blocks, after_blocks.
  std::vector<std::string> modules(int64_t n_layers) const;
};

struct ParallelizePlan {
  TpPlan tp;
  // In forward order; every parameter of the model in one unit (the root holds none).
  std::vector<FsdpUnit> fsdp_units;
  // Modules whose forward activation checkpointing wraps, in forward order: the blocks. Each must
  // run inside one FSDP unit and hold no parameter whose gradient is ready first in backward
  // (parallel/activation_checkpoint.h says why).
  std::vector<std::string> checkpoint_units;
  PipelineLayout pipeline;
};

// The plan of the shared decoder (models/common/transformer.h), Llama 3's, Qwen3's and
// Qwen3-MoE's: attention's wq, wk, wv column-wise and wo row-wise, a dense feed_forward's w1, w3
// and w2, the norms whole; a MoE layer whole on every tp rank (each routes its share of the
// sequence); latent attention's heads split (wq or wq_b and wkv_b column-wise, wo row-wise, the
// latents wkv_a, wq_a and their norms whole, their gradients summed over tp); FSDP units
// tok_embeddings, each block, a MoE layer's experts nested in their block (over efsdp under
// expert parallelism), [norm, output], as torchtitan's apply_fsdp, a tied embedding kept
// gathered for the head; every block checkpointable.
ParallelizePlan decoder_plan(const ModelArgs& args);

// One line for the log: "column-wise attention.wq/wk/wv, feed_forward.w1/w3; row-wise ...".
std::string describe(const TpPlan& plan);

}  // namespace ctitan::models
