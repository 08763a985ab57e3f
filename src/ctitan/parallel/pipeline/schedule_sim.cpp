#include "ctitan/parallel/pipeline/schedule_sim.h"

#include <algorithm>
#include <stdexcept>

namespace ctitan::parallel::pipeline {

namespace {

constexpr double kUnset = -1;  // virtual times are >= 0

struct Board {
  const PipeShape& shape;
  // Post time per p2p tag of each end; kUnset until posted.
  std::vector<double> send_post, recv_post;
  // Completion time per (stage, mb) of each compute kind, for local hand-over and B after F.
  std::vector<double> f_done, b_done;

  explicit Board(const PipeShape& s)
      : shape(s),
        send_post(2 * cells(), kUnset),
        recv_post(2 * cells(), kUnset),
        f_done(cells(), kUnset),
        b_done(cells(), kUnset) {}
  size_t cells() const { return static_cast<size_t>(shape.stages()) * static_cast<size_t>(shape.microbatches); }
  size_t cell(int stage, int mb) const { return static_cast<size_t>(stage * shape.microbatches + mb); }

  // When the transfer with this tag happens: once both ends are posted (kUnset before).
  double transfer(int32_t tag) const {
    double s = send_post[static_cast<size_t>(tag)], r = recv_post[static_cast<size_t>(tag)];
    return s == kUnset || r == kUnset ? kUnset : std::max(s, r);
  }

  // When a compute action's input is available, kUnset if not yet (or never).
  double input_ready(const Action& a) const {
    if (a.op == Op::F) {
      if (a.stage == 0) return 0;
      if (shape.rank_of(a.stage - 1) == shape.rank_of(a.stage)) return f_done[cell(a.stage - 1, a.microbatch)];
      return transfer(tag_of(Action{Op::RecvF, a.stage, a.microbatch}, shape));
    }
    // B needs its own forward, and the gradient from stage + 1 unless it is the last stage.
    double own_f = f_done[cell(a.stage, a.microbatch)];
    if (own_f == kUnset || a.stage == shape.stages() - 1) return own_f;
    double grad = shape.rank_of(a.stage + 1) == shape.rank_of(a.stage)
                      ? b_done[cell(a.stage + 1, a.microbatch)]
                      : transfer(tag_of(Action{Op::RecvB, a.stage, a.microbatch}, shape));
    return grad == kUnset ? kUnset : std::max(own_f, grad);
  }
};

}  // namespace

SimResult simulate(const std::vector<std::vector<Action>>& lowered, const PipeShape& shape, double t_f, double t_b) {
  const size_t ranks = lowered.size();
  for (const auto& actions : lowered)
    for (const Action& a : actions)
      if (a.stage < 0 || a.stage >= shape.stages() || a.microbatch < 0 || a.microbatch >= shape.microbatches)
        throw std::invalid_argument("simulate: action " + to_string(a) + " is outside the pipeline shape");

  Board board(shape);
  std::vector<size_t> pc(ranks, 0);
  std::vector<double> clock(ranks, 0), busy(ranks, 0);
  std::vector<int> in_flight(static_cast<size_t>(shape.stages()), 0);
  SimResult result;
  result.peak_in_flight.assign(static_cast<size_t>(shape.stages()), 0);

  // Each rank runs its actions in order, as early as their inputs allow. Sweep the ranks until
  // none can move; an action's time depends only on already-final times, so the order of the
  // sweep does not change the result.
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t r = 0; r < ranks; ++r) {
      for (; pc[r] < lowered[r].size(); ++pc[r], moved = true) {
        const Action& a = lowered[r][pc[r]];
        const size_t stage = static_cast<size_t>(a.stage);
        if (a.op == Op::RecvF || a.op == Op::RecvB) {
          board.recv_post[static_cast<size_t>(tag_of(a, shape))] = clock[r];
        } else if (a.op == Op::SendF || a.op == Op::SendB) {
          board.send_post[static_cast<size_t>(tag_of(a, shape))] = clock[r];
        } else if (a.op == Op::WaitF || a.op == Op::WaitB) {
          double done = board.transfer(tag_of(a, shape));
          if (done == kUnset) break;
          clock[r] = std::max(clock[r], done);
        } else {
          double ready = board.input_ready(a);
          if (ready == kUnset) break;
          double cost = a.op == Op::F ? t_f : t_b;
          clock[r] = std::max(clock[r], ready) + cost;
          busy[r] += cost;
          auto& done = a.op == Op::F ? board.f_done : board.b_done;
          done[board.cell(a.stage, a.microbatch)] = clock[r];
          in_flight[stage] += a.op == Op::F ? 1 : -1;
          result.peak_in_flight[stage] = std::max(result.peak_in_flight[stage], in_flight[stage]);
        }
      }
    }
  }

  result.completed = true;
  for (size_t r = 0; r < ranks; ++r) {
    bool done = pc[r] == lowered[r].size();
    result.completed = result.completed && done;
    result.stuck.push_back(done ? "" : to_string(lowered[r][pc[r]]));
    result.makespan = std::max(result.makespan, clock[r]);
  }
  for (size_t r = 0; r < ranks; ++r)
    result.idle_share.push_back(result.makespan > 0 ? 1 - busy[r] / result.makespan : 0);
  for (size_t tag = 0; tag < board.send_post.size(); ++tag) result.transfer_time.push_back(board.transfer(int32_t(tag)));
  return result;
}

double theoretical_bubble(ScheduleKind kind, const PipeShape& shape) {
  const double p = shape.pp, m = shape.microbatches;
  const double v = kind == ScheduleKind::kInterleaved1F1B ? shape.stages_per_rank : 1;
  // In units of one (F + B): a rank works v*m and the step lasts v*max(m, p) + min(m, p) - 1.
  // With m >= p that is the classic v*m + p - 1. With m < p a microbatch's trip around the p
  // ranks takes p units while only m of them carry work, so each of the v loops idles p - m.
  return 1 - v * m / (v * std::max(m, p) + std::min(m, p) - 1);
}

}  // namespace ctitan::parallel::pipeline
