#include "ctitan/rpc/agent.h"

#include <c10/util/Logging.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/rpc/rref_context.h>
#include <torch/csrc/distributed/rpc/tensorpipe_agent.h>
#include <torch/csrc/distributed/rpc/utils.h>
#include <torch/csrc/jit/mobile/type_parser.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "ctitan/common/message_text.h"
#include "ctitan/common/error.h"
#include "ctitan/distributed/dist_env.h"
#include "ctitan/distributed/store.h"
#include "ctitan/rpc/api.h"
#include "ctitan/rpc/detail.h"
#include "ctitan/rpc/registry.h"
#include "ctitan/rpc/request_handler.h"
#include "ctitan/rpc/wire.h"

namespace ctitan::rpc {

namespace {

namespace tdr = torch::distributed::rpc;
namespace tda = torch::distributed::autograd;

enum class Phase { NotStarted, Running, Stopped };

struct State {
  std::mutex mutex;
  Phase phase = Phase::NotStarted;
  bool shutting_down = false;
  std::shared_ptr<tdr::TensorPipeAgent> agent;
  c10::intrusive_ptr<c10d::Store> store;  // "rpc/" inside the launcher's store
  RpcOptions options;
  std::string name;
  int rank = 0;
  int world_size = 1;
  RRefCounts final_rref_counts;  // taken when the agent stopped
};

State& state() {
  static State s;
  return s;
}

std::string worker_name_error(const std::string& name) {
  if (name.empty() || name.size() >= 128) return fmt::format("is {} bytes (1 to 127)", name.size());
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == ':' || c == '-';
    if (!ok) return "has a character outside [A-Za-z0-9_:-]";
  }
  return "";
}

std::string rank_key(const char* what, int rank) { return fmt::format("ctitan/{}/{}", what, rank); }

// Every worker sets its key and waits for all the others' within `timeout`; the error names the
// ranks that did not arrive. Returns the values, by rank.
std::vector<std::string> exchange(c10d::Store& store, const char* what, int rank, int world_size,
                                  const std::string& value, double timeout_seconds, const std::string& self) {
  store.set(rank_key(what, rank), std::vector<uint8_t>(value.begin(), value.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(rank_key(what, r));
  try {
    store.wait(keys, std::chrono::milliseconds(int64_t(timeout_seconds * 1000)));
  } catch (const std::exception&) {
    std::string missing;
    for (int r = 0; r < world_size; ++r) {
      if (!store.check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    throw InputError(fmt::format("rpc {} of {}: rank(s) {} did not arrive within {:g} s", what, self,
                                 missing.empty() ? "?" : missing, timeout_seconds));
  }
  std::vector<std::string> values;
  for (const auto& key : keys) {
    auto bytes = store.get(key);
    values.emplace_back(bytes.begin(), bytes.end());
  }
  return values;
}

// The agent logs warnings when a peer dies and at shutdown; ctitan reports one error line instead.
void quiet_agent_logs() {
  const char* verbose = std::getenv("CTITAN_RPC_VERBOSE");
  if (verbose != nullptr && std::string(verbose) == "1") return;
  if (FLAGS_caffe2_log_level < 2) FLAGS_caffe2_log_level = 2;  // c10::GLOG_ERROR
}

// Upstream's internal messages resolve type names through this; parseType("Any") would give a
// DynamicType, so Any is mapped explicitly.
void set_type_resolver(tdr::RpcAgent& agent) {
  agent.setTypeResolver(std::make_shared<tdr::TypeResolver>([](const c10::QualifiedName& name) {
    const auto& text = name.qualifiedName();
    return c10::StrongTypePtr(nullptr, text == "Any" ? c10::AnyType::get() : c10::parseType(text));
  }));
}

// By rank: the agent's own order is a hash map's.
std::vector<WorkerInfo> workers_by_rank(const tdr::RpcAgent& agent) {
  std::vector<WorkerInfo> infos;
  for (const auto& info : agent.getWorkerInfos()) infos.push_back(WorkerInfo{info.name_, info.id_});
  std::sort(infos.begin(), infos.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return infos;
}

RRefCounts read_rref_counts() {
  RRefCounts counts;
  for (const auto& [key, value] : tdr::RRefContext::getInstance().getDebugInfo()) {
    const int64_t n = std::stoll(value);
    if (key == "num_owner_rrefs") counts.owner_rrefs = n;
    if (key == "num_forks") counts.forks = n;
    if (key == "num_pending_users") counts.pending_users = n;
    if (key == "num_pending_futures") counts.pending_futures = n;
  }
  return counts;
}

}  // namespace

namespace detail {

const tdr::WorkerInfo& find_worker(const tdr::RpcAgent& agent, const std::string& name) {
  auto infos = workers_by_rank(agent);
  for (const auto& info : infos) {
    if (info.name == name) return agent.getWorkerInfo(tdr::worker_id_t(info.id));
  }
  std::string known;
  for (const auto& info : infos) known += (known.empty() ? "" : ", ") + info.name;
  throw InputError(fmt::format("rpc: no worker named '{}' (workers: {})", name, known));
}

std::shared_ptr<tdr::TensorPipeAgent> running_agent(const std::string& function, double* default_timeout) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.phase == Phase::NotStarted) throw RpcError(RpcErrorKind::Shutdown, message::before_init(function));
  if (s.phase == Phase::Stopped) throw RpcError(RpcErrorKind::Shutdown, message::after_shutdown(function));
  if (default_timeout != nullptr) *default_timeout = s.options.timeout_seconds;
  return s.agent;
}

}  // namespace detail

using detail::find_worker;
using detail::running_agent;

void init_rpc(const std::string& name, const RpcOptions& options) {
  auto env = distributed::read_dist_env();
  init_rpc(name, env.rank, env.world_size, options);
}

void init_rpc(const std::string& name, int rank, int world_size, const RpcOptions& options) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.phase != Phase::NotStarted) {
    throw std::logic_error(fmt::format("rpc: init_rpc('{}') called twice: RPC starts once per process (upstream's "
                                       "RRef context is a process-wide singleton), even after shutdown",
                                       name));
  }
  if (auto why = worker_name_error(name); !why.empty()) throw InputError(fmt::format("rpc: worker name '{}' {}", name, why));
  if (world_size < 1 || world_size > 32767 || rank < 0 || rank >= world_size) {
    throw InputError(fmt::format("rpc: rank {} of world size {} is out of range", rank, world_size));
  }
  if (options.timeout_seconds < 0 || options.init_timeout_seconds <= 0 || options.num_worker_threads < 1) {
    throw InputError(fmt::format("rpc: RpcOptions of worker '{}': timeout_seconds must be >= 0 (got {:g}), "
                                 "init_timeout_seconds > 0 (got {:g}), num_worker_threads >= 1 (got {})",
                                 name, options.timeout_seconds, options.init_timeout_seconds,
                                 options.num_worker_threads));
  }
  quiet_agent_logs();
  auto env = distributed::read_dist_env();
  env.rank = rank;
  env.world_size = world_size;
  const auto init_timeout = std::chrono::milliseconds(int64_t(options.init_timeout_seconds * 1000));
  auto store = c10::make_intrusive<c10d::PrefixStore>("rpc", distributed::connect_store(env, init_timeout));
  detail::register_builtin_functions();
  freeze_registry();

  std::shared_ptr<tdr::TensorPipeAgent> agent;
  try {
    tda::DistAutogradContainer::init(rank);
    tdr::TensorPipeRpcBackendOptions backend(options.num_worker_threads, std::nullopt, options.channels,
                                             float(options.timeout_seconds), "env://");
    agent = std::make_shared<tdr::TensorPipeAgent>(store, name, tdr::worker_id_t(rank), world_size, backend,
                                                   std::unordered_map<std::string, tdr::DeviceMap>{},
                                                   std::vector<c10::Device>{}, make_request_handler(name));
    tdr::RpcAgent::setCurrentRpcAgent(agent);
    set_type_resolver(*agent);
    tdr::RRefContext::getInstance();  // binds upstream's RRef context to this agent
    agent->start();
  } catch (const c10::Error& e) {
    s.phase = Phase::Stopped;  // the singletons may be half-bound: no second attempt
    throw InputError(fmt::format("rpc: init_rpc of worker '{}' (rank {} of {}) failed: {}", name, rank, world_size,
                                 first_line(e.what_without_backtrace())));
  }
  // Nobody calls a peer before every worker listens. Each publishes its registry's fingerprint:
  // every worker runs the same binary, so a difference means calls between them may fail.
  const std::string mine = registry_fingerprint();
  std::vector<std::string> theirs;
  try {
    theirs = exchange(*store, "start", rank, world_size, mine, options.init_timeout_seconds, name);
  } catch (...) {
    s.phase = Phase::Stopped;  // as above: the singletons are bound to this agent
    tdr::RRefContext::destroyInstance(/*ignoreRRefLeak=*/true);
    agent->shutdown();
    tdr::RpcAgent::setCurrentRpcAgent(nullptr);
    throw;
  }
  for (int r = 0; r < world_size; ++r) {
    if (theirs[r] != mine) {
      fmt::print(stderr, "rpc warning: worker '{}' registered other functions ({}) than '{}' ({}): calls between "
                         "them may fail with 'no function registered'\n",
                 agent->getWorkerInfo(tdr::worker_id_t(r)).name_, theirs[r], name, mine);
    }
  }
  s.agent = agent;
  s.store = store;
  s.options = options;
  s.name = name;
  s.rank = rank;
  s.world_size = world_size;
  s.phase = Phase::Running;
}

void shutdown(bool graceful) {
  auto& s = state();
  std::shared_ptr<tdr::TensorPipeAgent> agent;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.phase != Phase::Running || s.shutting_down) return;
    s.shutting_down = true;
    agent = s.agent;
  }
  // Calls stay allowed until the agent has joined: calls in flight may still make nested calls.
  std::exception_ptr barrier_error;
  if (graceful) {
    try {
      const auto timeout = std::chrono::milliseconds(int64_t(s.options.init_timeout_seconds * 1000));
      // Every worker has reached shutdown, so no new RRefs are made after this (PyTorch's order).
      exchange(*s.store, "shutdown", s.rank, s.world_size, "", s.options.init_timeout_seconds, s.name);
      // Users release their RRefs (still-held handles included), then the owner waits until every
      // user has told it so.
      tdr::RRefContext::getInstance().delAllUsersAndUnforkedOwners(timeout);
      // Repeats a store-based count until no worker has a call in flight (nested calls, calls from
      // callbacks and the RRef messages above included), then stops accepting.
      agent->join(/*shutdown=*/true, float(s.options.init_timeout_seconds));
    } catch (...) {
      barrier_error = std::current_exception();
    }
  }
  const RRefCounts counts = read_rref_counts();
  // Graceful shutdown released every user: what remains is a leak (upstream logs it as a warning,
  // which ctitan's log threshold hides).
  if (graceful && !barrier_error && !counts.all_zero()) {
    fmt::print(stderr, "rpc warning: worker '{}' shut down with RRefs still counted ({})\n", s.name,
               counts.describe());
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.final_rref_counts = counts;
    s.phase = Phase::Stopped;
  }
  tdr::RRefContext::destroyInstance(/*ignoreRRefLeak=*/true);
  agent->shutdown();  // joins the timeout thread and TensorPipe, drains the pool
  tdr::RpcAgent::setCurrentRpcAgent(nullptr);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.agent.reset();
  }
  if (barrier_error) {
    try {
      std::rethrow_exception(barrier_error);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      throw InputError(fmt::format("rpc shutdown of '{}': {}", s.name, first_line(e.what())));
    }
  }
}

bool rpc_running() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.phase == Phase::Running;
}

WorkerInfo get_worker_info() {
  auto agent = running_agent("get_worker_info", nullptr);
  const auto& info = static_cast<const tdr::RpcAgent&>(*agent).getWorkerInfo();
  return WorkerInfo{info.name_, info.id_};
}

WorkerInfo get_worker_info(const std::string& name) {
  auto agent = running_agent("get_worker_info", nullptr);
  const auto& info = find_worker(*agent, name);
  return WorkerInfo{info.name_, info.id_};
}

std::vector<WorkerInfo> get_worker_infos() {
  auto agent = running_agent("get_worker_infos", nullptr);
  return workers_by_rank(*agent);
}

RRefCounts rref_counts() {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.phase == Phase::Stopped) return s.final_rref_counts;
    if (s.phase == Phase::NotStarted) return RRefCounts{};
  }
  return read_rref_counts();
}

std::string RRefCounts::describe() const {
  return fmt::format("owner_rrefs={} forks={} pending_users={} pending_futures={}", owner_rrefs, forks, pending_users,
                     pending_futures);
}

}  // namespace ctitan::rpc
