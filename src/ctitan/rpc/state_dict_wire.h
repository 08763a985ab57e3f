#pragma once
// A StateDict (std::map) as the c10::Dict the RPC codec carries, and back: optimizer, model and
// dataloader states cross the wire this way (DistributedOptimizer's state_dict, ctitan ps).
#include <ATen/core/Dict.h>

#include "ctitan/common/state_dict.h"

namespace ctitan::rpc {

inline c10::Dict<std::string, at::Tensor> to_wire(const StateDict& state) {
  c10::Dict<std::string, at::Tensor> out;
  for (const auto& [key, tensor] : state) out.insert(key, tensor);
  return out;
}

inline StateDict from_wire(const c10::Dict<std::string, at::Tensor>& wire) {
  StateDict out;
  for (const auto& entry : wire) out[entry.key()] = entry.value();
  return out;
}

}  // namespace ctitan::rpc
