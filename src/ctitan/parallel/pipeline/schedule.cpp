#include "ctitan/parallel/pipeline/schedule.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <stdexcept>
#include <utility>

#include "ctitan/common/error.h"

namespace ctitan::parallel::pipeline {

namespace {

std::string lower_case(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void check_shape(const PipeShape& shape) {
  if (shape.pp < 1 || shape.stages_per_rank < 1 || shape.microbatches < 1)
    throw std::invalid_argument("pipeline shape needs pp, stages_per_rank and microbatches >= 1 (got " +
                                std::to_string(shape.pp) + ", " + std::to_string(shape.stages_per_rank) + ", " +
                                std::to_string(shape.microbatches) + ")");
}

// One stage per rank, so rank r runs stage r.
std::vector<Action> gpipe_rank(int stage, int m) {
  std::vector<Action> ops;
  for (int mb = 0; mb < m; ++mb) ops.push_back({Op::F, stage, mb});
  for (int mb = 0; mb < m; ++mb) ops.push_back({Op::B, stage, mb});
  return ops;
}

// Schedule1F1B: min(m, p - s) warm-up forwards fill the pipe below this stage; then one backward
// and one forward alternate, so stage s never holds more than p - s microbatches.
std::vector<Action> one_f_one_b_rank(int stage, int p, int m) {
  std::vector<Action> ops;
  int warmup = std::min(m, p - stage);
  int next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) ops.push_back({Op::F, stage, next_f});
  while (next_b < m) {
    ops.push_back({Op::B, stage, next_b++});
    if (next_f < m) ops.push_back({Op::F, stage, next_f++});
  }
  return ops;
}

// ScheduleInterleaved1F1B._calculate_single_rank_operations with _get_1f1b_rank_ops, minus the
// None padding (which only aligns PyTorch's printed grid). Microbatches go in rounds of
// mpr = m / rounds: forwards visit the local stages in blocks of mpr microbatches, ascending;
// backwards visit them in blocks too, descending, starting with the op after warm-up.
std::vector<Action> interleaved_rank(int rank, const PipeShape& shape) {
  const int p = shape.pp, v = shape.stages_per_rank, m = shape.microbatches;
  const int rounds = std::max(1, m / p);
  const int mpr = m / rounds;
  // The last rank needs (v-1)*mpr forwards before its first backward; each hop further from the
  // last stage adds 2 (one forward out, one backward back).
  const int warmup = std::min((v - 1) * mpr + 2 * (p - 1 - rank), v * m);
  const int total_f = v * m;
  const int fwd_bwd = total_f - warmup;
  auto forward_stage = [&](int op) { return ((op / mpr) % v) * p + rank; };
  auto backward_stage = [&](int op) { return (v - 1 - ((op - warmup) / mpr) % v) * p + rank; };

  std::vector<int> next_f(static_cast<size_t>(shape.stages()), 0), next_b(static_cast<size_t>(shape.stages()), 0);
  std::vector<Action> ops;
  auto push_f = [&](int op) {
    int s = forward_stage(op);
    ops.push_back({Op::F, s, next_f[static_cast<size_t>(s)]++});
  };
  auto push_b = [&](int op) {
    int s = backward_stage(op);
    ops.push_back({Op::B, s, next_b[static_cast<size_t>(s)]++});
  };
  for (int op = 0; op < warmup + fwd_bwd + warmup; ++op) {
    if (op < warmup) {
      push_f(op);
    } else if (op < warmup + fwd_bwd) {
      push_f(op);
      push_b(op);
    } else {
      push_b(op);
    }
  }
  return ops;
}

// The input a compute action receives from another rank, if any.
bool input_recv(const Action& a, const PipeShape& shape, Action* recv) {
  if (a.op == Op::F && a.stage > 0 && shape.rank_of(a.stage - 1) != shape.rank_of(a.stage)) {
    *recv = {Op::RecvF, a.stage, a.microbatch};
    return true;
  }
  if (a.op == Op::B && a.stage < shape.stages() - 1 && shape.rank_of(a.stage + 1) != shape.rank_of(a.stage)) {
    *recv = {Op::RecvB, a.stage, a.microbatch};
    return true;
  }
  return false;
}

// The output a compute action sends to another rank, if any.
bool output_send(const Action& a, const PipeShape& shape, Action* send) {
  if (a.op == Op::F && a.stage < shape.stages() - 1 && shape.rank_of(a.stage + 1) != shape.rank_of(a.stage)) {
    *send = {Op::SendF, a.stage, a.microbatch};
    return true;
  }
  if (a.op == Op::B && a.stage > 0 && shape.rank_of(a.stage - 1) != shape.rank_of(a.stage)) {
    *send = {Op::SendB, a.stage, a.microbatch};
    return true;
  }
  return false;
}

std::vector<Action> lower_rank(const std::vector<Action>& order, const PipeShape& shape) {
  std::vector<Action> out;
  // SendB actions still unwaited, in issue order: (stage, mb).
  std::vector<std::pair<int, int>> open_send_b;
  auto post_recv_for = [&](size_t k) {
    Action recv{};
    if (k < order.size() && input_recv(order[k], shape, &recv)) out.push_back(recv);
  };
  post_recv_for(0);
  for (size_t k = 0; k < order.size(); ++k) {
    const Action& a = order[k];
    if (a.op != Op::F && a.op != Op::B)
      throw std::invalid_argument("lower() takes F/B orders, got " + to_string(a));
    // Posted before compute k so it overlaps it: one receive buffer ahead per direction.
    post_recv_for(k + 1);
    Action later_send{};
    if (a.op == Op::B && a.stage + shape.pp < shape.stages() &&
        output_send(Action{Op::B, a.stage + shape.pp, a.microbatch}, shape, &later_send)) {
      // B(s + pp, mb) ran earlier on this rank and sent its gradient to s + pp - 1; this
      // backward is causally after the peer received it, so the wait returns at once and only
      // frees the buffer.
      auto it = std::find(open_send_b.begin(), open_send_b.end(), std::pair{later_send.stage, later_send.microbatch});
      if (it == open_send_b.end())
        throw std::logic_error("pipeline order runs " + to_string(a) + " before " +
                               to_string(Action{Op::B, later_send.stage, later_send.microbatch}));
      out.push_back({Op::WaitB, later_send.stage, later_send.microbatch});
      open_send_b.erase(it);
    }
    out.push_back(a);
    Action send{};
    if (output_send(a, shape, &send)) {
      out.push_back(send);
      if (send.op == Op::SendB) open_send_b.emplace_back(send.stage, send.microbatch);
    }
    // B(s, mb) consumed the gradient that s + 1 computed from our activation, so that
    // activation's send has completed: the wait only releases the buffer.
    if (a.op == Op::B && a.stage < shape.stages() - 1 && shape.rank_of(a.stage + 1) != shape.rank_of(a.stage))
      out.push_back({Op::WaitF, a.stage, a.microbatch});
  }
  // Gradients sent from this rank's first stage: no later local compute is causally after their
  // receipt, so they are held to the end of the run.
  for (const auto& [stage, mb] : open_send_b) out.push_back({Op::WaitB, stage, mb});
  return out;
}

const char* op_text(Op op) {
  switch (op) {
    case Op::F: return "F";
    case Op::B: return "B";
    case Op::RecvF: return "RECV_F";
    case Op::SendF: return "SEND_F";
    case Op::RecvB: return "RECV_B";
    case Op::SendB: return "SEND_B";
    case Op::WaitF: return "WAIT_F";
    case Op::WaitB: return "WAIT_B";
  }
  return "?";
}

}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  const std::string key = lower_case(name);
  if (key == "gpipe") return ScheduleKind::kGPipe;
  if (key == "1f1b") return ScheduleKind::k1F1B;
  if (key == "interleaved1f1b") return ScheduleKind::kInterleaved1F1B;
  throw ConfigError("parallelism.pipeline_parallel_schedule must be one of GPipe, 1F1B, Interleaved1F1B (got '" +
                    name +
                    "'; torchtitan's LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble and DualPipeV are not "
                    "implemented)");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "GPipe";
    case ScheduleKind::k1F1B: return "1F1B";
    case ScheduleKind::kInterleaved1F1B: return "Interleaved1F1B";
  }
  return "?";
}

std::vector<std::vector<Action>> compute_orders(ScheduleKind kind, const PipeShape& shape) {
  check_shape(shape);
  std::vector<std::vector<Action>> orders;
  if (kind == ScheduleKind::kInterleaved1F1B) {
    const int rounds = std::max(1, shape.microbatches / shape.pp);
    if (shape.microbatches % rounds != 0)
      throw std::invalid_argument("Interleaved1F1B needs microbatches divisible by max(1, m / pp) rounds (got m " +
                                  std::to_string(shape.microbatches) + ", pp " + std::to_string(shape.pp) + ")");
    for (int r = 0; r < shape.pp; ++r) orders.push_back(interleaved_rank(r, shape));
    return orders;
  }
  if (shape.stages_per_rank != 1)
    throw std::invalid_argument(std::string(schedule_name(kind)) + " runs one stage per rank (got " +
                                std::to_string(shape.stages_per_rank) + ")");
  for (int r = 0; r < shape.pp; ++r)
    orders.push_back(kind == ScheduleKind::kGPipe ? gpipe_rank(r, shape.microbatches)
                                                  : one_f_one_b_rank(r, shape.pp, shape.microbatches));
  return orders;
}

std::vector<std::vector<Action>> lower(const std::vector<std::vector<Action>>& orders, const PipeShape& shape) {
  check_shape(shape);
  std::vector<std::vector<Action>> lowered;
  lowered.reserve(orders.size());
  for (const auto& order : orders) lowered.push_back(lower_rank(order, shape));
  return lowered;
}

std::string to_string(const Action& action) {
  return std::to_string(action.stage) + op_text(action.op) + std::to_string(action.microbatch);
}

std::string to_string(const std::vector<Action>& actions) {
  std::string text;
  for (const Action& a : actions) {
    if (!text.empty()) text += ' ';
    text += to_string(a);
  }
  return text;
}

int peer_stage(const Action& comm) {
  switch (comm.op) {
    case Op::SendF:
    case Op::RecvB:
    case Op::WaitF: return comm.stage + 1;
    case Op::RecvF:
    case Op::SendB:
    case Op::WaitB: return comm.stage - 1;
    default: throw std::invalid_argument("peer_stage of a compute action: " + to_string(comm));
  }
}

int32_t tag_of(const Action& comm, const PipeShape& shape) {
  int64_t dir = 0, receiver = 0;
  switch (comm.op) {
    case Op::RecvF: dir = 0, receiver = comm.stage; break;
    case Op::SendF:
    case Op::WaitF: dir = 0, receiver = comm.stage + 1; break;
    case Op::RecvB: dir = 1, receiver = comm.stage; break;
    case Op::SendB:
    case Op::WaitB: dir = 1, receiver = comm.stage - 1; break;
    default: throw std::invalid_argument("tag_of a compute action: " + to_string(comm));
  }
  const int64_t tag = (dir * shape.stages() + receiver) * shape.microbatches + comm.microbatch;
  // Gloo tags are non-negative 32-bit; 2 * S * m stays far below 2^31 for any real pipeline.
  if (tag < 0 || tag > std::numeric_limits<int32_t>::max())
    throw std::logic_error("pipeline tag out of range for " + to_string(comm));
  return static_cast<int32_t>(tag);
}

}  // namespace ctitan::parallel::pipeline
