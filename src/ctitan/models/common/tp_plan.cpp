#include "ctitan/models/common/tp_plan.h"

namespace ctitan::models {

TpPlan dense_decoder_tp_plan(const ModelArgs& args) {
  TpPlan plan;
  plan.sublayers = {{"attention", {"wq", "wk", "wv"}, "wo"}, {"feed_forward", {"w1", "w3"}, "w2"}};
  plan.replicated = {"attention_norm", "ffn_norm"};
  if (args.qk_norm) plan.replicated.insert(plan.replicated.end(), {"attention.q_norm", "attention.k_norm"});
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
