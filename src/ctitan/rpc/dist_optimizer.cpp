#include "ctitan/rpc/dist_optimizer.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <mutex>

#include "ctitan/common/error.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/detail.h"
#include "ctitan/rpc/registry.h"
#include "ctitan/train/adamw.h"

namespace ctitan::rpc {

namespace {

constexpr const char* kCreate = "ctitan.dist_optim.create";
constexpr const char* kStep = "ctitan.dist_optim.step";
constexpr const char* kGradSqNorm = "ctitan.dist_optim.grad_sq_norm";

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
      train::AdamWOptions o;
      if (options.contains("beta1")) o.beta1 = options.at("beta1");
      if (options.contains("beta2")) o.beta2 = options.at("beta2");
      if (options.contains("eps")) o.eps = options.at("eps");
      if (options.contains("weight_decay")) o.weight_decay = options.at("weight_decay");
      std::vector<std::pair<std::string, at::Tensor>> named;
      for (size_t i = 0; i < params_.size(); ++i) named.emplace_back(fmt::format("param{}", i), params_[i]);
      adamw_ = std::make_unique<train::AdamW>(std::move(named), o);
    }
  }

  void step(int64_t context_id, double lr, double grad_scale) {
    auto grads = dist_autograd::get_gradients(context_id);
    // Steps from several trainers' contexts may arrive at once (PyTorch's global lock does the same).
    std::lock_guard<std::mutex> lock(mutex_);
    torch::NoGradGuard no_grad;
    for (auto& p : params_) {
      if (!grads.contains(p)) continue;
      at::Tensor grad = grad_scale == 1.0 ? grads.at(p) : grads.at(p) * grad_scale;
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
  }

  double grad_sq_norm(int64_t context_id) const {
    auto grads = dist_autograd::get_gradients(context_id);
    double sum = 0;
    for (const auto& p : params_) {
      if (grads.contains(p)) sum += grads.at(p).to(at::kDouble).pow(2).sum().item<double>();
    }
    return sum;
  }

 private:
  std::mutex mutex_;
  std::vector<at::Tensor> params_;
  std::unique_ptr<train::AdamW> adamw_;  // null for sgd
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
  });
}

}  // namespace detail

DistributedOptimizer::DistributedOptimizer(const std::string& optimizer, const std::vector<RRef>& params,
                                           const c10::Dict<std::string, double>& options) {
  validate(optimizer, options);
  std::map<std::string, std::vector<RRef>> by_owner;  // ordered: the same owners in the same order everywhere
  for (const auto& p : params) {
    if (!p.valid()) throw InputError("rpc: DistributedOptimizer got an empty RRef among its parameters");
    by_owner[p.owner().name].push_back(p);
  }
  for (auto& [owner, owned] : by_owner) {
    local_optimizers_.emplace_back(owner, remote(owner, kCreate, optimizer, options, owned));
  }
}

std::vector<c10::IValue> DistributedOptimizer::on_every_owner(const char* function, int64_t context_id,
                                                               const std::vector<double>& args) {
  std::vector<Future> calls;
  for (const auto& [owner, optimizer] : local_optimizers_) {
    std::vector<c10::IValue> values{c10::IValue(optimizer.impl()), c10::IValue(context_id)};
    for (double a : args) values.emplace_back(a);
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

double DistributedOptimizer::grad_sq_norm(const dist_autograd::Context& context) {
  double sum = 0;
  for (const auto& partial : on_every_owner(kGradSqNorm, context.id(), {})) sum += partial.toDouble();
  return sum;
}

void DistributedOptimizer::step(const dist_autograd::Context& context, double lr, double grad_scale) {
  on_every_owner(kStep, context.id(), {lr, grad_scale});
}

}  // namespace ctitan::rpc
