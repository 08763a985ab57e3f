#pragma once
// Activation checkpointing applied to a built decoder from outside, as torchtitan's
// apply_ac: a checkpointed block keeps only its input for backward; its backward runs the
// block's forward again (with grad, under the autocast state of the first run) and then its
// backward. Losses and gradients equal those without it, bitwise in fp32: the same ops, in the
// same order, on the same inputs.
//
// Order (torchtitan): TP -> activation checkpointing -> FSDP. The checkpoint wraps the block's
// own forward, inside FSDP's hooks, so FSDP gathers the block once for forward and once for
// backward as without checkpointing, and the recomputation runs on those gathered parameters
// (FSDP's pre-backward gather happens before the checkpoint's backward, which then recomputes;
// the parameters stay gathered until the block's gradients are reduced). No extra gather.
#include <functional>
#include <string>
#include <vector>

#include "ctitan/config/job_config.h"
#include "ctitan/models/common/transformer.h"

namespace ctitan::parallel {

// Wraps the modules of `units` (ParallelizePlan::checkpoint_units: the blocks) that `model` holds.
// mode none: nothing. full: every block. selective with selective_ac_option = "k": every k-th
// block, counted as torchtitan counts (the blocks whose 1-based index is a multiple of k: k-1,
// 2k-1, ... from 0; k = 0 means every block); with option "op", every block with operator-level
// selective AC (op_selective_checkpoint.h: the outputs of matmuls, attention and the tp
// reduce-scatter are kept, the rest recomputed). Returns how many blocks were wrapped. Throws
// ConfigError for an option that is neither "op" nor a non-negative integer.
int apply_activation_checkpointing(models::TransformerImpl& model, const std::vector<std::string>& units,
                                   const config::ActivationCheckpoint& ac);

// One checkpointed call of `forward` on `input`. The region must not span an FSDP group
// boundary or hold the parameters whose gradients are ready first in backward (the output
// layer's): FSDP and DDP queue their end-of-backward callback from the first gradient hook, and
// inside the recomputation's nested backward that callback would run when the nested backward
// ends, too early. A transformer block, as apply_activation_checkpointing wraps, is safe.
// RNG state is not replayed (the decoder has no dropout).
torch::Tensor checkpointed(const torch::Tensor& input, const models::ModuleHooks::Forward& forward);


}  // namespace ctitan::parallel
