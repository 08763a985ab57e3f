#include "ctitan/parallel/pipeline/issue_order.h"

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>
#include <tuple>

namespace ctitan::parallel::pipeline {
namespace {

constexpr double kNotDone = -1;  // virtual times are >= 0

bool is_transfer(Op op) { return op == Op::SendF || op == Op::RecvF || op == Op::SendB || op == Op::RecvB; }
bool is_send(Op op) { return op == Op::SendF || op == Op::SendB; }

// The compute action whose output a send carries.
Action producer_of(const Action& send) { return {send.op == Op::SendF ? Op::F : Op::B, send.stage, send.microbatch}; }

// The receive a compute action consumes, and the send it produces (the ops schedule.h's lower()
// placed around it), found in that rank's lowered actions.
struct Neighbours {
  std::map<std::tuple<Op, int32_t, int32_t>, Action> recv_of, send_of;  // keyed by the compute action
};

Neighbours neighbours(const std::vector<Action>& lowered) {
  Neighbours n;
  for (const Action& a : lowered) {
    if (a.op == Op::RecvF) n.recv_of[{Op::F, a.stage, a.microbatch}] = a;
    if (a.op == Op::RecvB) n.recv_of[{Op::B, a.stage, a.microbatch}] = a;
    if (is_send(a.op)) n.send_of[{producer_of(a).op, a.stage, a.microbatch}] = a;
  }
  return n;
}

std::vector<Action> lower_rank_in_issue_order(const std::vector<Action>& rendezvous_lowered, const PipeShape& shape,
                                              const std::vector<double>& transfer_time) {
  // This rank's transfers, per peer rank, in the order both sides agree on.
  std::map<int, std::deque<Action>> queue;
  for (const Action& a : rendezvous_lowered)
    if (is_transfer(a.op)) queue[shape.rank_of(peer_stage(a))].push_back(a);
  for (auto& [peer, ops] : queue) {
    std::stable_sort(ops.begin(), ops.end(), [&](const Action& x, const Action& y) {
      const int32_t tx = tag_of(x, shape), ty = tag_of(y, shape);
      return std::pair{transfer_time.at(size_t(tx)), tx} < std::pair{transfer_time.at(size_t(ty)), ty};
    });
  }
  const Neighbours around = neighbours(rendezvous_lowered);
  std::vector<Action> out;
  std::map<std::tuple<Op, int32_t, int32_t>, bool> computed;
  // Issues this rank's operations with the peer of `target` up to and including it.
  auto issue_through = [&](const Action& target) {
    auto& ops = queue[shape.rank_of(peer_stage(target))];
    while (true) {
      if (ops.empty()) throw std::logic_error("issue-order lowering lost " + to_string(target));
      const Action next = ops.front();
      if (is_send(next.op) && !computed.count({producer_of(next).op, next.stage, next.microbatch}))
        throw std::logic_error("issue-order lowering: " + to_string(next) + " must be issued before " +
                               to_string(target) + ", ahead of the compute that produces it");
      ops.pop_front();
      out.push_back(next);
      if (next == target) return;
    }
  };
  auto issued = [&](const Action& a) { return std::find(out.begin(), out.end(), a) != out.end(); };
  for (const Action& a : rendezvous_lowered) {
    if (is_transfer(a.op)) continue;  // placed around the compute actions below
    if (a.op == Op::F || a.op == Op::B) {
      if (auto it = around.recv_of.find({a.op, a.stage, a.microbatch}); it != around.recv_of.end() && !issued(it->second))
        issue_through(it->second);
      out.push_back(a);
      computed[{a.op, a.stage, a.microbatch}] = true;
      if (auto it = around.send_of.find({a.op, a.stage, a.microbatch}); it != around.send_of.end() && !issued(it->second))
        issue_through(it->second);
    } else {
      out.push_back(a);  // WaitX: where lower() put it, after the send it waits for
    }
  }
  for (const auto& [peer, ops] : queue)
    if (!ops.empty()) throw std::logic_error("issue-order lowering left " + to_string(ops.front()) + " unissued");
  return out;
}

}  // namespace

std::vector<std::vector<Action>> lower_in_issue_order(const std::vector<std::vector<Action>>& orders,
                                                      const PipeShape& shape) {
  const auto rendezvous = lower(orders, shape);
  // The agreed order comes from a run of the rendezvous plan: equal costs for F and B suffice, any
  // completed run orders each pair's transfers consistently with both ranks' compute orders.
  const SimResult run = simulate(rendezvous, shape, 1, 1);
  if (!run.completed) throw std::logic_error("issue-order lowering: the rendezvous plan does not complete");
  std::vector<std::vector<Action>> lowered;
  for (const auto& actions : rendezvous) lowered.push_back(lower_rank_in_issue_order(actions, shape, run.transfer_time));
  return lowered;
}

SimResult simulate_in_issue_order(const std::vector<std::vector<Action>>& lowered, const PipeShape& shape, double t_f,
                                  double t_b) {
  const size_t ranks = lowered.size();
  const size_t cells = size_t(shape.stages()) * size_t(shape.microbatches);
  auto cell = [&](int stage, int mb) { return size_t(stage) * size_t(shape.microbatches) + size_t(mb); };
  std::vector<double> f_done(cells, kNotDone), b_done(cells, kNotDone), transfer(2 * cells, kNotDone);
  struct Issued {
    Action action;
    double gate;  // when the compute issued before it has finished
  };
  std::map<std::pair<size_t, size_t>, std::vector<Issued>> issued;  // (rank, peer) -> in issue order
  std::map<std::pair<size_t, size_t>, size_t> paired;               // (low, high) -> transfers done
  std::map<std::pair<size_t, size_t>, double> pair_clock;           // (low, high) -> last transfer's end
  std::vector<size_t> pc(ranks, 0);
  std::vector<double> clock(ranks, 0), busy(ranks, 0);
  std::vector<int> in_flight(size_t(shape.stages()), 0);
  SimResult result;
  result.peak_in_flight.assign(size_t(shape.stages()), 0);
  std::string mismatch;

  auto match = [&](size_t a, size_t b) {
    const auto key = std::pair{std::min(a, b), std::max(a, b)};
    auto& lo = issued[{key.first, key.second}];
    auto& hi = issued[{key.second, key.first}];
    for (size_t& k = paired[key]; k < lo.size() && k < hi.size(); ++k) {
      const Issued& x = lo[k];
      const Issued& y = hi[k];
      if (is_send(x.action.op) == is_send(y.action.op) || tag_of(x.action, shape) != tag_of(y.action, shape)) {
        mismatch = "rank " + std::to_string(key.first) + " " + to_string(x.action) + " paired with rank " +
                   std::to_string(key.second) + " " + to_string(y.action);
        return;
      }
      const double end = std::max({x.gate, y.gate, pair_clock[key]});
      pair_clock[key] = end;
      transfer[size_t(tag_of(x.action, shape))] = end;
    }
  };
  auto input_ready = [&](const Action& a) -> double {
    if (a.op == Op::F) {
      if (a.stage == 0) return 0;
      if (shape.rank_of(a.stage - 1) == shape.rank_of(a.stage)) return f_done[cell(a.stage - 1, a.microbatch)];
      return transfer[size_t(tag_of(Action{Op::RecvF, a.stage, a.microbatch}, shape))];
    }
    const double own_f = f_done[cell(a.stage, a.microbatch)];
    if (own_f == kNotDone || a.stage == shape.stages() - 1) return own_f;
    const double grad = shape.rank_of(a.stage + 1) == shape.rank_of(a.stage)
                            ? b_done[cell(a.stage + 1, a.microbatch)]
                            : transfer[size_t(tag_of(Action{Op::RecvB, a.stage, a.microbatch}, shape))];
    return grad == kNotDone ? kNotDone : std::max(own_f, grad);
  };

  for (bool moved = true; moved && mismatch.empty();) {
    moved = false;
    for (size_t r = 0; r < ranks && mismatch.empty(); ++r) {
      for (; pc[r] < lowered[r].size() && mismatch.empty(); ++pc[r], moved = true) {
        const Action& a = lowered[r][pc[r]];
        if (is_transfer(a.op)) {
          const size_t peer = size_t(shape.rank_of(peer_stage(a)));
          issued[{r, peer}].push_back({a, clock[r]});
          match(r, peer);
        } else if (a.op == Op::WaitF || a.op == Op::WaitB) {
          const double done = transfer[size_t(tag_of(a, shape))];
          if (done == kNotDone) break;
          clock[r] = std::max(clock[r], done);
        } else {
          const double ready = input_ready(a);
          if (ready == kNotDone) break;
          const double cost = a.op == Op::F ? t_f : t_b;
          clock[r] = std::max(clock[r], ready) + cost;
          busy[r] += cost;
          (a.op == Op::F ? f_done : b_done)[cell(a.stage, a.microbatch)] = clock[r];
          const size_t stage = size_t(a.stage);
          in_flight[stage] += a.op == Op::F ? 1 : -1;
          result.peak_in_flight[stage] = std::max(result.peak_in_flight[stage], in_flight[stage]);
        }
      }
    }
  }

  result.completed = mismatch.empty();
  for (size_t r = 0; r < ranks; ++r) {
    const bool done = pc[r] == lowered[r].size();
    result.completed = result.completed && done;
    result.stuck.push_back(done ? "" : to_string(lowered[r][pc[r]]));
    result.makespan = std::max(result.makespan, clock[r]);
  }
  if (!mismatch.empty()) result.stuck.push_back(mismatch);
  for (size_t r = 0; r < ranks; ++r) result.idle_share.push_back(result.makespan > 0 ? 1 - busy[r] / result.makespan : 0);
  result.transfer_time = transfer;
  return result;
}

}  // namespace ctitan::parallel::pipeline
