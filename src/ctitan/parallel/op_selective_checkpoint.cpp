#include "ctitan/parallel/op_selective_checkpoint.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>
#include <torch/library.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ctitan/parallel/activation_checkpoint.h"

namespace ctitan::parallel {
namespace {

// The key our kernels sit on: below Autograd and Autocast, above the CPU/CUDA kernels (see the header).
constexpr auto kOpSacKey = c10::DispatchKey::CustomRNGKeyId;

// The dispatcher ops whose outputs are kept (torchtitan's list, less the ones that cannot occur
// here: the math SDPA decomposes above autograd, max matters for float8 only).
constexpr const char* kSavedAtenOps[] = {
    "mm",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
};

struct Entry {
  std::string op;
  std::vector<std::vector<int64_t>> input_shapes;  // the replay checks it sees the same op on the same shapes
  std::vector<c10::IValue> outputs;
  std::vector<uint32_t> versions;  // each output tensor's version when kept (0 for non-tensors)
};

// The kept outputs of one checkpointed block call. First run: record; second run: replay.
class SavedOps {
 public:
  bool recording() const { return recording_; }

  // The every-other-mm policy, counted per run, so the first forward and the recompute agree.
  bool keeps(const std::string& op) {
    if (op != "aten::mm") return true;
    return ++mm_count_ % 2 == 1;
  }

  void record(std::string op, std::vector<std::vector<int64_t>> input_shapes, std::vector<c10::IValue> outputs) {
    Entry e{std::move(op), std::move(input_shapes), std::move(outputs), {}};
    for (const auto& v : e.outputs) e.versions.push_back(v.isTensor() ? v.toTensor()._version() : 0);
    entries_.push_back(std::move(e));
  }

  // The front entry, checked against what the recompute is calling; popped, so the cache lets go
  // of each output as soon as autograd (or the next op) owns it.
  std::vector<c10::IValue> replay(const std::string& op, const std::vector<std::vector<int64_t>>& input_shapes) {
    TORCH_CHECK(!entries_.empty(), "op selective AC: the recompute called ", op,
                " after every op kept by the first forward was used; the block's forward is not deterministic");
    Entry e = std::move(entries_.front());
    entries_.pop_front();
    TORCH_CHECK(e.op == op && e.input_shapes == input_shapes, "op selective AC: the recompute called ", op,
                " where the first forward called ", e.op, " (or on other shapes); the block's forward is not deterministic");
    for (size_t i = 0; i < e.outputs.size(); ++i) {
      if (!e.outputs[i].isTensor()) continue;
      TORCH_CHECK(e.outputs[i].toTensor()._version() == e.versions[i], "op selective AC: an output of ", op,
                  " kept for backward was modified in place during the forward; it cannot be reused");
    }
    return std::move(e.outputs);
  }

  // Ends a run of the block: after the first, switch to replay; after the recompute, everything
  // kept must have been taken back.
  void finish_run(const torch::Tensor& output) {
    if (recording_) {
      // The block's output gets the checkpoint's backward node; a kept tensor gets its op's node in
      // the recompute. One tensor cannot carry both.
      for (const auto& e : entries_) {
        for (const auto& v : e.outputs) {
          TORCH_CHECK(!(v.isTensor() && v.toTensor().is_same(output)), "op selective AC: the block returns the output of ",
                      e.op, " unchanged; a kept op cannot end the region");
        }
      }
      recording_ = false;
    } else {
      TORCH_CHECK(entries_.empty(), "op selective AC: the recompute left ", entries_.size(),
                  " ops kept by the first forward unused; the block's forward is not deterministic");
    }
    mm_count_ = 0;
  }

 private:
  bool recording_ = true;
  int64_t mm_count_ = 0;
  std::deque<Entry> entries_;
};

thread_local SavedOps* tls_active = nullptr;
thread_local OpSacCounts tls_counts;

// One run of a block with its cache active on this thread: the key on (our kernels see the ops),
// the cache reachable by them. Restores both on exit, exceptions included.
class ActiveRegion {
 public:
  explicit ActiveRegion(SavedOps& ops) : include_(kOpSacKey), previous_(tls_active) { tls_active = &ops; }
  ~ActiveRegion() { tls_active = previous_; }
  ActiveRegion(const ActiveRegion&) = delete;
  ActiveRegion& operator=(const ActiveRegion&) = delete;

 private:
  c10::impl::IncludeDispatchKeyGuard include_;
  SavedOps* previous_;
};

std::vector<std::vector<int64_t>> tensor_shapes(c10::ArrayRef<c10::IValue> args) {
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& a : args) {
    if (a.isTensor() && a.toTensor().defined()) shapes.push_back(a.toTensor().sizes().vec());
  }
  return shapes;
}

// The kernel of every kept op on kOpSacKey. The key is in the included set only inside a block's
// runs, on that block's thread; another thread that inherited the key (an intra-op worker) has no
// cache and runs the op.
void saved_op_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto below = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kOpSacKey);
  SavedOps* ops = tls_active;
  const auto& schema = op.schema();
  if (ops == nullptr) return op.redispatchBoxed(below, stack);
  if (!ops->keeps(schema.name())) {
    ++tls_counts.recomputed;
    return op.redispatchBoxed(below, stack);
  }
  const size_t n_args = schema.arguments().size(), n_returns = schema.returns().size();
  auto shapes = tensor_shapes(torch::jit::last(*stack, n_args));
  if (ops->recording()) {
    op.redispatchBoxed(below, stack);
    auto outputs = torch::jit::last(*stack, n_returns).vec();
    ops->record(schema.name(), std::move(shapes), std::move(outputs));
    ++tls_counts.saved;
    return;
  }
  auto outputs = ops->replay(schema.name(), shapes);
  torch::jit::drop(*stack, n_args);
  for (auto& v : outputs) stack->push_back(std::move(v));
  ++tls_counts.replayed;
}

// Never deleted: the registrations must outlive every op of the process. Held in globals so that
// LeakSanitizer sees them reachable rather than lost.
torch::Library* g_fallthrough_library = nullptr;
torch::Library* g_saved_ops_library = nullptr;

void register_kernels_once() {
  static const bool registered = [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    TORCH_CHECK(!dispatcher.hasBackendFallbackForDispatchKey(kOpSacKey), "op selective AC: something in this process "
                "already registered kernels on dispatch key ", kOpSacKey, ", which op SAC needs for itself");
    g_fallthrough_library = new torch::Library(torch::Library::IMPL, "_", kOpSacKey, __FILE__, __LINE__);
    g_fallthrough_library->fallback(torch::CppFunction::makeFallthrough());
    g_saved_ops_library = new torch::Library(torch::Library::IMPL, "aten", kOpSacKey, __FILE__, __LINE__);
    for (const char* name : kSavedAtenOps) {
      g_saved_ops_library->impl(name, torch::CppFunction::makeFromBoxedFunction<&saved_op_kernel>());
    }
    return true;
  }();
  (void)registered;
}

}  // namespace

torch::Tensor op_selective_checkpointed(const torch::Tensor& input, const models::ModuleHooks::Forward& forward) {
  if (!torch::GradMode::is_enabled() || !input.requires_grad()) return forward(input);
  register_kernels_once();
  auto ops = std::make_shared<SavedOps>();
  // checkpointed() runs this once without grad (record) and, in backward, once with grad
  // (replay) before its nested backward, which so runs with the key off: backward ops are never
  // intercepted.
  return checkpointed(input, [ops, forward](const torch::Tensor& x) {
    torch::Tensor output;
    {
      ActiveRegion region(*ops);
      output = forward(x);
    }
    ops->finish_run(output);
    return output;
  });
}

torch::Tensor saved_op(const char* name, const std::function<torch::Tensor()>& compute) {
  SavedOps* ops = tls_active;
  if (ops == nullptr) return compute();
  if (ops->recording()) {
    auto output = compute();
    ops->record(name, {}, {output});
    ++tls_counts.saved;
    return output;
  }
  auto output = ops->replay(name, {})[0].toTensor();
  ++tls_counts.replayed;
  return output;
}

OpSacCounts op_sac_counts() { return tls_counts; }

}  // namespace ctitan::parallel
