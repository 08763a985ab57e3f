#pragma once
// A family's tensor-parallel plan, as torchtitan's per-block layer plan (ColwiseParallel on wq,
// RowwiseParallel on wo, ...): which modules of a block split how. Data only: parallel/tp applies
// it, so the family names its modules and parallel/ names none. The decoder's own entry points
// (tok_embeddings, norm, output) are the same for every family and are not in the plan.
#include <string>
#include <vector>

#include "ctitan/models/common/model_args.h"

namespace ctitan::models {

// A sub-module of a block whose input is gathered on the sequence and whose output is
// reduce-scattered back onto it (sequence parallel), with its projections sliced in between.
struct TpSublayer {
  std::string module;                    // the block's child, e.g. "attention"
  std::vector<std::string> column_wise;  // its Linear children split by output rows, in call order ("wq", "wk", "wv")
  std::string row_wise;                  // the Linear child split by input columns ("wo")
};

struct TpPlan {
  std::vector<TpSublayer> sublayers;    // in the order the block calls them
  // Weights (by path in the block, without ".weight") every tp rank holds whole and computes
  // gradients for from its own share: the norms, and the QK-norms, which act on whole heads.
  std::vector<std::string> replicated;
};

// The plan of the shared dense decoder (models/common/transformer.h), Llama 3's and Qwen3's:
// attention's wq, wk, wv column-wise and wo row-wise; feed_forward's w1, w3 and w2; the norms whole.
TpPlan dense_decoder_tp_plan(const ModelArgs& args);

// One line for the log: "column-wise attention.wq/wk/wv, feed_forward.w1/w3; row-wise ...".
std::string describe(const TpPlan& plan);

}  // namespace ctitan::models
