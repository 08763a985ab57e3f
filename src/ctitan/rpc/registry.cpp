#include "ctitan/rpc/registry.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "ctitan/common/fnv_hash.h"
#include "ctitan/rpc/wire.h"

namespace ctitan::rpc {

namespace {

struct Registry {
  std::mutex mutex;
  // Never erased: find_function hands out pointers to the handlers.
  std::unordered_map<std::string, Handler> handlers;
  bool frozen = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_handler(const std::string& name, Handler handler) {
  validate_function_name(name);
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.frozen) {
    throw std::logic_error(fmt::format("rpc: register_function('{}') after init_rpc: register every function "
                                       "before init_rpc, on every worker",
                                       name));
  }
  if (!r.handlers.emplace(name, std::move(handler)).second) {
    throw std::logic_error(fmt::format("rpc: function '{}' is registered twice", name));
  }
}

const Handler* find_function(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.handlers.find(name);
  return it == r.handlers.end() ? nullptr : &it->second;
}

std::vector<std::string> registered_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, handler] : r.handlers) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string registry_fingerprint() {
  // Over the sorted names, each ended by a NUL: stable across processes and builds.
  Fnv1a64 hash;
  auto names = registered_names();
  for (const auto& name : names) hash.add(name).add(std::string_view("\0", 1));
  return fmt::format("{} functions, {}", names.size(), hash.hex());
}

void freeze_registry() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.frozen = true;
}

}  // namespace ctitan::rpc
