#include "ctitan/common/state_dict.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"

namespace ctitan {

const torch::Tensor& require_state(const StateDict& state, const std::string& key) {
  auto it = state.find(key);
  if (it == state.end()) throw InputError(fmt::format("state error: missing entry '{}'", key));
  return it->second;
}

}  // namespace ctitan
