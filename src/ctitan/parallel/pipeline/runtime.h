#pragma once
// PipelineRuntime: runs this rank's lowered schedule (schedule.h) for one local batch: forward
// and backward of its stage per microbatch, activations and their gradients sent to and
// received from the neighbouring stages on the pp group, the loss on the last stage.
//
// The loss is the one every layout backpropagates: summed cross-entropy / the global batch's
// valid-token count, so gradients equal one process's with no rescaling afterwards
// (torchtitan's PP loss scaling bugs #1733 and #2972 have no place to happen).
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "ctitan/distributed/communicator.h"
#include "ctitan/parallel/pipeline/schedule.h"
#include "ctitan/parallel/pipeline/schedule_sim.h"

namespace ctitan::parallel::pipeline {

// What crosses a stage boundary, known ahead from the config (never inferred at run time,
// which is what hung torchtitan's multi-node runs, #1492): activations and their gradients
// alike are (microbatch_size, seq_len / tp, dim), since under TP each tp rank sends its sequence
// shard; fp32, or bf16 under FSDP with bf16 parameters (the dtype the residual stream is in).
struct BoundarySpec {
  std::vector<int64_t> shape;
  torch::ScalarType dtype = torch::kFloat;
  torch::Device device = torch::kCPU;
};

struct StageFunctions {
  // Stage `stage` of this rank: token ids (B, T) on the first stage, else the previous stage's
  // hidden state (B, T, dim) -> hidden state (B, T, dim), or logits on the last stage.
  std::function<torch::Tensor(int stage, const torch::Tensor& input)> forward;
  // The last stage's summed token cross-entropy of `logits` against `labels` (0-d).
  std::function<torch::Tensor(const torch::Tensor& logits, const torch::Tensor& labels)> summed_loss;
  // Before each backward of `stage` (may be empty): `last` is that stage's last backward of the
  // run, `sync` whether it should reduce the stage's gradients (FSDP: reduce-scatter once per
  // step, after the stage's last microbatch; keep its parameters gathered until then). Under an
  // interleaved schedule each of a rank's stages is its own model part with its own wrapper.
  std::function<void(int stage, bool last, bool sync)> before_backward;
};

// Where one run's seconds went on this rank.
struct PipelineTimes {
  double busy = 0;   // forward and backward compute
  double total = 0;  // the whole run
};

class PipelineRuntime {
 public:
  PipelineRuntime(PipeShape shape, ScheduleKind kind, int pp_rank, std::shared_ptr<distributed::Communicator> pp_group,
                  BoundarySpec boundary, StageFunctions stage);

  // One schedule run over a local batch: inputs and labels (B, T), B = microbatches x
  // microbatch size, cut into microbatches along B. Gradients accumulate into the stage's
  // parameters. Returns the sum of the microbatches' losses (each summed CE / `denominator`),
  // a 0-d fp32 tensor, exactly 0 on ranks without the last stage.
  // `reduce_grads`: this run's last backward reduces the gradients (the last accumulation run).
  torch::Tensor run(const torch::Tensor& inputs, const torch::Tensor& labels, const torch::Tensor& denominator,
                    bool reduce_grads = true);

  // Forward only, without grad (validation): each microbatch through this rank's stages in
  // ascending order, every rank walking (microbatch, stage) in the same global order, so each send
  // waits only for a receive its peer posts next. Returns the summed cross-entropy of the local
  // batch as a 0-d fp32 tensor on the last stage's ranks, exactly 0 on the others.
  torch::Tensor evaluate(const torch::Tensor& inputs, const torch::Tensor& labels);

  // Seconds of the runs since the last call.
  PipelineTimes take_times();
  const std::vector<Action>& actions() const { return actions_; }
  // The idle share of equal stages in theory (schedule_sim.h).
  double theoretical_bubble() const { return pipeline::theoretical_bubble(kind_, shape_); }

 private:
  using Key = std::pair<int32_t, int32_t>;  // (stage, microbatch)
  struct Pending {
    torch::Tensor buffer;
    std::shared_ptr<distributed::Work> work;
  };
  void forward(const Action& a, const torch::Tensor& inputs, const torch::Tensor& labels,
               const torch::Tensor& denominator, torch::Tensor& loss_sum);
  void backward(const Action& a, bool last);
  void post_receive(const Action& a);
  void send(const Action& a);
  void wait_send(const Action& a);
  int peer_rank(const Action& a) const { return shape_.rank_of(peer_stage(a)); }
  torch::Tensor take_received(std::map<Key, Pending>& pending, const Action& a);
  int64_t microbatch_rows(const torch::Tensor& inputs) const;  // rows of a local batch per microbatch

  PipeShape shape_;
  ScheduleKind kind_;
  int pp_rank_;
  std::shared_ptr<distributed::Communicator> group_;
  BoundarySpec boundary_;
  StageFunctions stage_;
  std::vector<Action> actions_;  // this rank's lowered schedule
  std::vector<int> local_stages_;  // ascending
  std::set<size_t> last_backwards_;  // indices in actions_ of each local stage's last B
  int64_t microbatch_rows_ = 0;
  bool reduce_grads_ = true;

  // Per run: each entry lives from the action that makes it to the action that consumes it.
  std::map<Key, Pending> activations_in_, gradients_in_;          // posted receives
  std::map<Key, std::pair<torch::Tensor, torch::Tensor>> saved_;  // F's (input leaf, output or loss)
  std::map<Key, torch::Tensor> input_grads_;                      // B's result, until sent
  std::map<std::tuple<bool, int32_t, int32_t>, std::shared_ptr<distributed::Work>> sends_;  // (forward?, s, mb)
  PipelineTimes times_;
};

}  // namespace ctitan::parallel::pipeline
