#include "ctitan/parallel/pipeline/stage_model.h"

#include <fmt/format.h>

#include <set>
#include <stdexcept>

#include "ctitan/models/common/deferred_init.h"
#include "ctitan/parallel/deferred_params.h"

namespace ctitan::parallel::pipeline {

void keep_stage_modules(models::TransformerImpl& model, const std::vector<std::string>& fqns) {
  std::set<std::string> present;
  if (model.tok_embeddings) present.insert("tok_embeddings");
  for (const auto& item : *model.layers) present.insert("layers." + item.key());
  if (model.norm) present.insert("norm");
  if (model.head()) present.insert("output");
  for (const auto& fqn : fqns) {  // checked before anything is dropped
    if (!present.count(fqn)) throw std::logic_error(fmt::format("pipeline stage: the model has no module '{}'", fqn));
  }
  const std::set<std::string> wanted(fqns.begin(), fqns.end());

  // A new dict of the kept blocks: ModuleDict::pop would leave the dropped blocks registered,
  // and with them their parameters.
  auto kept = torch::nn::ModuleDict();
  for (const auto& item : *model.layers) {
    if (wanted.count("layers." + item.key())) kept->update({{item.key(), item.value()}});
  }
  model.layers = model.replace_module("layers", kept);
  if (model.tok_embeddings && !wanted.count("tok_embeddings")) {
    model.unregister_module("tok_embeddings");
    model.tok_embeddings = nullptr;
  }
  if (model.norm && !wanted.count("norm")) {
    model.unregister_module("norm");
    model.norm = nullptr;
  }
  if (model.output && !wanted.count("output")) {
    model.unregister_module("output");
    model.output = nullptr;
  }
  // A tied head reads tok_embeddings' weight: the trainer refuses PP for such a model, so a stage
  // keeps both or neither.
  if (model.tied_head && !wanted.count("output")) model.tied_head = nullptr;
  if (model.tied_head && !model.tok_embeddings) {
    throw std::logic_error("pipeline stage: a tied output layer without tok_embeddings");
  }
}

models::Transformer copy_model(const models::TransformerImpl& model) {
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto rng = generator.get_state();  // the constructor's default init draws from it
  auto source = model.named_parameters();
  // A deferred model (deferred_init.h) is copied without values: the stages' weights are drawn
  // once the layout is set.
  const bool deferred = !source.is_empty() && models::is_deferred(source.begin()->value());
  models::Transformer copy{nullptr};
  if (deferred) {
    models::DeferredInitScope scope;
    copy = models::Transformer(model.args());
  } else {
    copy = models::Transformer(model.args());
  }
  generator.set_state(rng);
  if (deferred) {
    move_deferred(*copy, source.begin()->value().device());
    return copy;
  }
  torch::NoGradGuard no_grad;
  for (auto& item : copy->named_parameters()) item.value().copy_(source[item.key()]);
  auto source_buffers = model.named_buffers();
  for (auto& item : copy->named_buffers()) item.value().copy_(source_buffers[item.key()]);
  copy->to(source.begin()->value().device());
  return copy;
}

}  // namespace ctitan::parallel::pipeline
