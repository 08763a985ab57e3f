#pragma once
// One round of the batched parameter server: a slot per trainer, filled by pushes on the RPC
// agent's threads, and one shared future that answers every trainer of the round at once
// (PyTorch's batch-update parameter server, with the update moved to the server's main thread so
// that the round can time out and a lost trainer can end it).
#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ctitan/common/state_dict.h"
#include "ctitan/rpc/future.h"

namespace ctitan::ps {

// A trainer's step as the server receives it: in the gradients mode its gradient; in the
// dist_autograd mode (ps.report) only its figures and dataloader position.
struct Push {
  int rank = 0;            // the trainer's rank (1..trainers)
  int64_t step = 0;        // the step the gradient is for (1-based)
  torch::Tensor grads;     // (numel,) fp32: gradient of the trainer's SUMMED token loss
  int64_t tokens = 0;      // valid tokens the trainer's loss summed over
  double loss_sum = 0;     // the trainer's summed cross-entropy
  double last_latency_s = -1;  // the trainer's previous push, push to new parameters (-1: none yet)
  StateDict loader_state;  // the trainer's dataloader after this step's batches (for checkpoints)
  // The dist_autograd mode's report (the trainer stepped itself; grads stay empty):
  double grad_norm = 0;    // the trainer's gradient norm before clipping
  int64_t rpc_bytes = 0;   // tensor bytes of its embedding lookup: ids, vectors, their gradient
};

class GradientRound {
 public:
  // Slots for trainer ranks 1..trainers; the first round is for `first_step`. `what` names a
  // push in the timeout's message ("gradient", "report").
  GradientRound(int trainers, int64_t first_step, std::string what);

  // On an agent thread: stores `push` in its trainer's slot and returns the round's shared
  // future (completed by finish() with the new parameters). Throws, naming the trainer, for a
  // push of another step or a second push in one round; that error reaches the trainer.
  rpc::Future add(Push push);

  // On the main thread: the round's pushes in rank order once every slot is full. Throws one
  // line naming the trainers that have not pushed after `timeout_s`, or the error given to fail().
  std::vector<Push> wait_full(double timeout_s);

  // Answers every trainer of the round with `params` and opens the next round. The state is
  // reset under the lock before the future completes, so a trainer's next push always lands
  // in the next round.
  void finish(const torch::Tensor& params);

  // A trainer is lost (its liveness call failed): wakes wait_full with `message`. The other
  // trainers' pushes stay pending: they fail (connection to ps lost) when the server exits, after
  // its own line, so the launcher reports the server's error, which names the lost trainer.
  void fail(const std::string& message);

  int64_t step() const;

 private:
  std::string missing_locked() const;

  const std::string what_;
  mutable std::mutex mutex_;
  std::condition_variable full_;
  int64_t step_;
  std::vector<std::optional<Push>> slots_;  // by rank - 1
  int filled_ = 0;
  rpc::Future shared_;
  std::string failure_;
};

}  // namespace ctitan::ps
