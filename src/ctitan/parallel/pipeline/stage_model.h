#pragma once
// Turns a built, initialized model into one pipeline stage, in place, as torchtitan's
// pipeline_llm does with its deep copy: the modules the stage does not own are dropped, the rest
// keep their unsharded names (`layers.3.attention.wq.weight`), so checkpoints need no renaming.
#include <string>
#include <vector>

#include "ctitan/models/common/transformer.h"

namespace ctitan::parallel::pipeline {

// `fqns`: the stage's modules, e.g. {"tok_embeddings", "layers.0", "layers.1"} (stage_split.h).
// Every rank builds the full model from the same seed and keeps its part, so a pipeline starts
// from the weights one process starts from. Throws std::logic_error on a name the model lacks.
void keep_stage_modules(models::TransformerImpl& model, const std::vector<std::string>& fqns);

// A second model with the same weights (a rank's other stage under an interleaved schedule),
// made without drawing from the default generator, so the run's RNG state is as without it.
models::Transformer copy_model(const models::TransformerImpl& model);

}  // namespace ctitan::parallel::pipeline
