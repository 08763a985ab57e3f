#pragma once
// Loss parallel: cross-entropy over logits sharded on the vocabulary, without gathering them
// (torchtitan's loss_parallel()). Each tp rank holds columns [vocab_offset, vocab_offset + V_r)
// of every row. Per row, three numbers cross the group instead of V logits: the max (all-reduce
// MAX), then the sum of exponentials and the target logit (one all-reduce SUM: only the rank
// owning the label contributes a non-zero target). The loss comes out the same on every tp
// rank; backward needs no communication: each rank's gradient is softmax - onehot on its own
// columns.
#include <torch/torch.h>

#include "ctitan/distributed/communicator.h"

namespace ctitan::parallel::tp {

// logits: (N, V_r) fp32 or bf16 (math in fp32); labels: (N) global token ids. Rows whose label
// is ignore_index add 0. Returns the sum over rows of logsumexp(row over the whole vocabulary)
// - logit[label], a 0-d fp32 tensor.
torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels,
                                               int64_t vocab_offset, int64_t ignore_index,
                                               distributed::Communicator& group);

}  // namespace ctitan::parallel::tp
