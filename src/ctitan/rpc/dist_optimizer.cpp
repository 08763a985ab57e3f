#include "ctitan/rpc/dist_optimizer.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <mutex>

#include "ctitan/common/error.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/detail.h"
#include "ctitan/rpc/registry.h"
#include "ctitan/rpc/state_dict_wire.h"
#include "ctitan/components/adamw.h"

namespace ctitan::rpc {

namespace {

constexpr const char* kCreate = "ctitan.dist_optim.create";
constexpr const char* kStep = "ctitan.dist_optim.step";
constexpr const char* kGradSqNorm = "ctitan.dist_optim.grad_sq_norm";
constexpr const char* kAccumulate = "ctitan.dist_optim.accumulate";
// In place of a context id (upstream's ids are (worker id << 48) + n, never negative): the
// gradients accumulate()d since the last step.
constexpr int64_t kAccumulated = -1;
constexpr const char* kStateDict = "ctitan.dist_optim.state_dict";
constexpr const char* kLoadStateDict = "ctitan.dist_optim.load_state_dict";

// Checked on the caller (at construction) and again on the owner.
void validate(const std::string& optimizer, const c10::Dict<std::string, double>& options) {
  if (optimizer != "adamw" && optimizer != "sgd") {
    throw InputError(fmt::format("rpc: DistributedOptimizer '{}' is unknown (adamw, sgd)", optimizer));
  }
  for (const auto& entry : options) {
    const auto& key = entry.key();
    const bool known = optimizer == "adamw" &&
                       (key == "beta1" || key == "beta2" || key == "eps" || key == "weight_decay");
    if (!known) {
      throw InputError(fmt::format("rpc: DistributedOptimizer '{}' has no option '{}'{}", optimizer, key,
                                   optimizer == "adamw" ? " (beta1, beta2, eps, weight_decay)" : ""));
    }
  }
}

// One owner's optimizer over its own parameters. It stays on the owner as the value of an RRef
// (a capsule, which the codec refuses to send).
class LocalOptimizer : public torch::CustomClassHolder {
 public:
  LocalOptimizer(const std::string& kind, std::vector<at::Tensor> params, const c10::Dict<std::string, double>& options)
      : params_(std::move(params)) {
    if (kind == "adamw") {
      components::AdamWOptions o;
      if (options.contains("beta1")) o.beta1 = options.at("beta1");
      if (options.contains("beta2")) o.beta2 = options.at("beta2");
      if (options.contains("eps")) o.eps = options.at("eps");
      if (options.contains("weight_decay")) o.weight_decay = options.at("weight_decay");
      std::vector<std::pair<std::string, at::Tensor>> named;
      for (size_t i = 0; i < params_.size(); ++i) named.emplace_back(fmt::format("param{}", i), params_[i]);
      adamw_ = std::make_unique<components::AdamW>(std::move(named), o);
    }
  }

  // Adds the context's gradients into this optimizer's own sum, which outlives the context: a
  // microbatch per context, since FAST-mode backward cannot run a second forward's graph in one
  // (docs/RPC.md). The first is copied, the rest added in place, as autograd accumulates .grad.
  void accumulate(int64_t context_id) {
    auto grads = dist_autograd::get_gradients(context_id);
    std::lock_guard<std::mutex> lock(step_mutex());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!grads.contains(params_[i])) continue;
      const auto& g = grads.at(params_[i]);
      accumulated_[i] = accumulated_[i].defined() ? accumulated_[i].add_(g) : g.clone();
    }
  }

  void step(int64_t context_id, double lr, double grad_scale) {
    auto grads = gradients(context_id);
    // Steps from several trainers' contexts may arrive at once, and each trainer's optimizer on
    // this owner updates the same tensors in place (the PS's shared embedding): one lock for every
    // optimizer in the process, as PyTorch's _LocalOptimizer has, serialises them. A lock per
    // optimizer let two AdamW steps interleave on one tensor and lose parts of an update.
    std::lock_guard<std::mutex> lock(step_mutex());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      if (!grads[i].defined()) continue;
      at::Tensor grad = grad_scale == 1.0 ? grads[i] : grads[i] * grad_scale;
      if (adamw_) {
        p.mutable_grad() = grad;
      } else {
        p.sub_(grad, lr);
      }
    }
    if (adamw_) {
      adamw_->step(lr);
      adamw_->zero_grad();
    }
    if (context_id == kAccumulated) accumulated_.assign(params_.size(), at::Tensor());
  }

  // AdamW's keys for the owner's i-th parameter: state.param<i>.{exp_avg,exp_avg_sq,step}.
  StateDict state_dict() {
    std::lock_guard<std::mutex> lock(step_mutex());
    return adamw_ ? adamw_->state_dict() : StateDict{};
  }
  void load_state_dict(const StateDict& state) {
    std::lock_guard<std::mutex> lock(step_mutex());
    if (adamw_) adamw_->load_state_dict(state);
  }

  double grad_sq_norm(int64_t context_id) {
    double sum = 0;
    for (const auto& g : gradients(context_id)) {
      if (g.defined()) sum += g.to(at::kDouble).pow(2).sum().item<double>();
    }
    return sum;
  }

 private:
  static std::mutex& step_mutex() {
    static std::mutex m;
    return m;
  }

  // Each parameter's gradient (undefined: none) in the context, or in the accumulation.
  std::vector<at::Tensor> gradients(int64_t context_id) {
    if (context_id == kAccumulated) {
      std::lock_guard<std::mutex> lock(step_mutex());
      return accumulated_;
    }
    auto grads = dist_autograd::get_gradients(context_id);
    std::vector<at::Tensor> out(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      if (grads.contains(params_[i])) out[i] = grads.at(params_[i]);
    }
    return out;
  }

  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> accumulated_ = std::vector<at::Tensor>(params_.size());  // by parameter
  std::unique_ptr<components::AdamW> adamw_;  // null for sgd
};

}  // namespace

namespace detail {

void register_builtin_functions() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_function(kCreate, [](const std::string& kind, const c10::Dict<std::string, double>& options,
                                  const std::vector<RRef>& params) {
      validate(kind, options);
      std::vector<at::Tensor> tensors;
      for (const auto& p : params) {
        if (!p.is_owner()) throw std::invalid_argument("a parameter RRef is not owned by this worker");
        auto value = p.local_value();
        if (!value.isTensor()) throw std::invalid_argument("a parameter RRef holds a " + value_type_name(value));
        tensors.push_back(value.toTensor());
      }
      return c10::IValue::make_capsule(c10::make_intrusive<LocalOptimizer>(kind, std::move(tensors), options));
    });
    register_function(kStep, [](const RRef& optimizer, int64_t context_id, double lr, double grad_scale) {
      optimizer.local_object<LocalOptimizer>()->step(context_id, lr, grad_scale);
    });
    register_function(kGradSqNorm, [](const RRef& optimizer, int64_t context_id) {
      return optimizer.local_object<LocalOptimizer>()->grad_sq_norm(context_id);
    });
    register_function(kAccumulate, [](const RRef& optimizer, int64_t context_id) {
      optimizer.local_object<LocalOptimizer>()->accumulate(context_id);
    });
    register_function(kStateDict, [](const RRef& optimizer) {
      return to_wire(optimizer.local_object<LocalOptimizer>()->state_dict());
    });
    register_function(kLoadStateDict, [](const RRef& optimizer, const c10::Dict<std::string, at::Tensor>& state) {
      optimizer.local_object<LocalOptimizer>()->load_state_dict(from_wire(state));
    });
  });
}

}  // namespace detail

DistributedOptimizer::DistributedOptimizer(const std::string& optimizer, const std::vector<RRef>& params,
                                           const c10::Dict<std::string, double>& options) {
  validate(optimizer, options);
  // Ordered: the same owners in the same order everywhere. Per owner: (its RRefs, their indices).
  std::map<std::string, std::pair<std::vector<RRef>, std::vector<size_t>>> by_owner;
  for (const auto& p : params) {
    if (!p.valid()) throw InputError("rpc: DistributedOptimizer got an empty RRef among its parameters");
    auto& [owned, indices] = by_owner[p.owner().name];
    owned.push_back(p);
    indices.push_back(num_params_++);
  }
  for (auto& [owner, owned] : by_owner) {
    local_optimizers_.emplace_back(owner, remote(owner, kCreate, optimizer, options, owned.first));
    owned_params_.push_back(std::move(owned.second));
  }
}

std::vector<c10::IValue> DistributedOptimizer::on_every_owner(
    const char* function, const std::function<std::vector<c10::IValue>(size_t)>& args) {
  std::vector<Future> calls;
  for (size_t i = 0; i < local_optimizers_.size(); ++i) {
    const auto& [owner, optimizer] = local_optimizers_[i];
    std::vector<c10::IValue> values{c10::IValue(optimizer.impl())};
    for (auto& a : args(i)) values.push_back(std::move(a));
    calls.push_back(call_function(owner, function, std::move(values), CallOptions{}));
  }
  // Wait for every owner before reporting, so that nothing is still running when this returns.
  std::vector<c10::IValue> results;
  std::string failures;
  std::optional<RpcErrorKind> kind;
  for (auto& call : calls) {
    try {
      results.push_back(call.wait());
    } catch (const RpcError& e) {
      failures += (failures.empty() ? "" : "; ") + std::string(e.what());
      if (!kind) kind = e.kind();
    }
  }
  if (kind) throw RpcError(*kind, fmt::format("rpc: DistributedOptimizer {} failed: {}", function, failures));
  return results;
}

double DistributedOptimizer::grad_sq_norm(const dist_autograd::Context& context) { return grad_sq_norm(context.id()); }

double DistributedOptimizer::grad_sq_norm() { return grad_sq_norm(kAccumulated); }

double DistributedOptimizer::grad_sq_norm(int64_t id) {
  double sum = 0;
  for (const auto& partial : on_every_owner(kGradSqNorm, [&](size_t) { return std::vector<c10::IValue>{id}; })) {
    sum += partial.toDouble();
  }
  return sum;
}

void DistributedOptimizer::accumulate(const dist_autograd::Context& context) {
  const int64_t id = context.id();
  on_every_owner(kAccumulate, [&](size_t) { return std::vector<c10::IValue>{id}; });
}

void DistributedOptimizer::step(const dist_autograd::Context& context, double lr, double grad_scale) {
  step(context.id(), lr, grad_scale);
}

void DistributedOptimizer::step(double lr, double grad_scale) { step(kAccumulated, lr, grad_scale); }

void DistributedOptimizer::step(int64_t id, double lr, double grad_scale) {
  on_every_owner(kStep, [&](size_t) { return std::vector<c10::IValue>{id, lr, grad_scale}; });
}

namespace {

// An owner's key "state.param<i>.<field>" as (i, field).
std::pair<size_t, std::string> parse_owner_key(const std::string& key) {
  const std::string prefix = "state.param";
  const auto dot = key.find('.', prefix.size());
  if (key.rfind(prefix, 0) != 0 || dot == std::string::npos) {
    throw InputError(fmt::format("rpc: DistributedOptimizer: an owner sent the unexpected state key '{}'", key));
  }
  return {std::stoul(key.substr(prefix.size(), dot - prefix.size())), key.substr(dot + 1)};
}

}  // namespace

std::vector<StateDict> DistributedOptimizer::state_dict() {
  auto owners = on_every_owner(kStateDict, [](size_t) { return std::vector<c10::IValue>{}; });
  std::vector<StateDict> out(num_params_);
  for (size_t o = 0; o < owners.size(); ++o) {
    for (const auto& [key, tensor] : from_wire(from_ivalue<c10::Dict<std::string, at::Tensor>>(owners[o]))) {
      auto [i, field] = parse_owner_key(key);
      if (i >= owned_params_[o].size()) {
        throw InputError(fmt::format("rpc: DistributedOptimizer: {} sent the state of a parameter it does not own ('{}')",
                                     local_optimizers_[o].first, key));
      }
      out[owned_params_[o][i]][field] = tensor;
    }
  }
  return out;
}

void DistributedOptimizer::load_state_dict(const std::vector<StateDict>& state) {
  if (state.size() != num_params_) {
    throw InputError(fmt::format("rpc: DistributedOptimizer::load_state_dict got {} parameter states for its {} "
                                 "parameters", state.size(), num_params_));
  }
  on_every_owner(kLoadStateDict, [&](size_t o) {
    StateDict owner_state;
    for (size_t i = 0; i < owned_params_[o].size(); ++i) {
      for (const auto& [field, tensor] : state[owned_params_[o][i]]) {
        owner_state[fmt::format("state.param{}.{}", i, field)] = tensor;
      }
    }
    return std::vector<c10::IValue>{to_wire(owner_state)};
  });
}

}  // namespace ctitan::rpc
