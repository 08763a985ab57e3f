#include "ctitan/distributed/init_distributed.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <thread>

#include "ctitan/common/error.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/store.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

namespace ctitan::distributed {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string store_get_string(c10d::Store& store, const std::string& key) {
  auto bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

std::string first_config_difference(const std::string& a, const std::string& b) {
  auto la = lines_of(a), lb = lines_of(b);
  std::string section;
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    std::string x = i < la.size() ? la[i] : "", y = i < lb.size() ? lb[i] : "";
    if (!x.empty() && x.front() == '[') section = x.substr(1, x.find(']') - 1);
    if (x == y) continue;
    auto eq = x.find(" = ");
    std::string key = eq == std::string::npos ? x : x.substr(0, eq);
    auto value = [](const std::string& line) {
      auto pos = line.find(" = ");
      return pos == std::string::npos ? line : line.substr(pos + 3);
    };
    return fmt::format("{}.{} ({} vs {})", section, key, value(x), value(y));
  }
  return "";
}

void check_configs_agree(c10d::Store& store, int rank, int world_size, const std::string& config_toml) {
  store.set(fmt::format("config/{}", rank), std::vector<uint8_t>(config_toml.begin(), config_toml.end()));
  std::string reference;
  try {
    reference = store_get_string(store, "config/0");
    for (int r = 1; r < world_size; ++r) {
      auto other = store_get_string(store, fmt::format("config/{}", r));
      auto diff = first_config_difference(reference, other);
      if (diff.empty()) continue;
      // Every rank reaches this verdict from the same texts. Rank 0 may host the store: it leaves
      // only once every rank has read the configs, or the others would print "Broken pipe" (the
      // store gone mid-read) instead of the key. Bounded: every rank has passed the rendezvous.
      const auto verdicts = store.add("config/verdicts", 1);
      if (rank == 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (auto seen = verdicts; seen < world_size && std::chrono::steady_clock::now() < deadline;
             seen = store.add("config/verdicts", 0)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      throw InputError(fmt::format("rendezvous error: rank {}'s config differs from rank 0's at {}", r, diff));
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(fmt::format("rendezvous error: rank {} timed out waiting for the other ranks' configs: {}", rank,
                                 std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
  }
}

namespace {

// "pid 123 on host#nonce": the nonce tells two claims apart even from one process (tests run
// ranks as threads); messages show the part before '#'.
std::string this_claimant() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("pid {} on {}#{:x}", ::getpid(), host, std::random_device{}());
}

std::string shown(const std::string& claimant) { return claimant.substr(0, claimant.find('#')); }

}  // namespace

void join_rendezvous(c10d::Store& store, int rank, int world_size, std::chrono::milliseconds timeout) {
  const std::string me = this_claimant();
  const std::string error_key = "rendezvous/error", error_seen_key = "rendezvous/error_seen";
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(fmt::format("rendezvous/world_size/{}", r));
  // Rank 0 may host the store: it leaves only once every rank that arrived has read the failure,
  // or they would print "Broken pipe" (the store gone mid-read) instead of it. Those ranks poll
  // the error key every 50 ms, so the wait is short; it is bounded all the same.
  auto stop = [&](const std::string& message) {
    store.add(error_seen_key, 1);
    if (rank == 0) {
      int64_t arrived = 0;
      for (const auto& k : keys) arrived += store.check({k}) ? 1 : 0;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (store.add(error_seen_key, 0) < arrived && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    throw InputError("rendezvous error: " + message);
  };
  auto fail = [&](const std::string& message) {
    store.set(error_key, std::vector<uint8_t>(message.begin(), message.end()));  // the others stop too
    stop(message);
  };
  // RANK: the first process to claim it owns it; a second is named with the first.
  auto claimed = store.compareSet(fmt::format("rendezvous/rank/{}", rank), {}, std::vector<uint8_t>(me.begin(), me.end()));
  std::string owner(claimed.begin(), claimed.end());
  if (owner != me) fail(fmt::format("RANK {} is given to two processes ({} and {})", rank, shown(owner), shown(me)));
  auto text = std::to_string(world_size);
  store.set(fmt::format("rendezvous/world_size/{}", rank), std::vector<uint8_t>(text.begin(), text.end()));
  // Every rank this one expects says how many it expects; anyone's failure ends everyone's wait.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> seen(size_t(world_size), false);
  size_t remaining = size_t(world_size);
  while (remaining > 0) {
    if (store.check({error_key})) {
      auto bytes = store.get(error_key);
      stop(std::string(bytes.begin(), bytes.end()));
    }
    for (int r = 0; r < world_size; ++r) {
      if (seen[size_t(r)] || !store.check({keys[size_t(r)]})) continue;
      auto bytes = store.get(keys[size_t(r)]);
      std::string theirs(bytes.begin(), bytes.end());
      if (theirs != text) fail(fmt::format("rank {} has WORLD_SIZE {} but rank {} has {}", r, theirs, rank, text));
      seen[size_t(r)] = true;
      --remaining;
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<int> missing;
      for (int r = 0; r < world_size; ++r) {
        if (!seen[size_t(r)]) missing.push_back(r);
      }
      throw InputError(fmt::format("rendezvous error: rank {} waited {}s for rank(s) {} of WORLD_SIZE {} "
                                   "(comm.init_timeout_seconds)", rank, timeout.count() / 1000,
                                   fmt::join(missing, ", "), world_size));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::unique_ptr<DistContext> init_distributed(const config::JobConfig& config, const DistEnv& env) {
  auto ctx = std::make_unique<DistContext>();
  ctx->env = env;
  // One process asking for more ranks (a degree above 1) is an error here, not silently ignored.
  ctx->dims = ParallelDims::from_config(config.parallelism, env.world_size);
  auto timeout = std::chrono::milliseconds(config.comm.init_timeout_seconds * 1000);
  const bool alone = !env.distributed();
  if (alone) {
    // A world of one: nobody to meet, so no TCP store and no rendezvous; its groups have one
    // rank and no transport (Communicator::create_local).
    ctx->store = c10::make_intrusive<c10d::HashStore>();
  } else {
    ctx->store = connect_store(env, timeout);
    join_rendezvous(*ctx->store, env.rank, env.world_size, timeout);
    check_configs_agree(*ctx->store, env.rank, env.world_size, config::to_toml(config));
  }
  ctx->world = alone ? Communicator::create_local("world", timeout)
                    : Communicator::create(ctx->store, "world", env.rank, env.world_size, timeout);

  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (const auto& [name, size] : ctx->dims.mesh_dims()) {
    names.push_back(name);
    sizes.push_back(size);
  }
  if (ctx->dims.dp() == 1) {  // no data parallelism still gets a (trivial) dp dimension, inside pp
    auto at = names.begin() + (ctx->dims.pp_enabled() ? 1 : 0);
    sizes.insert(sizes.begin() + (at - names.begin()), 1);
    names.insert(at, "dp_shard");
  }
  ctx->mesh = std::make_unique<DeviceMesh>(names, sizes, env.rank);
  std::vector<std::string> dp_dims;
  for (const auto& n : names) {
    if (n == "dp_replicate" || n == "dp_shard" || n == "efsdp" || n == "ep") dp_dims.push_back(n);
  }
  if (ctx->dims.ep_enabled()) ctx->mesh->flatten({"efsdp", "ep"}, "dp_shard");
  if (!dp_dims.empty()) ctx->mesh->flatten(dp_dims, "dp");
  auto batch_dims = dp_dims;  // the ranks that compute the global batch between them
  if (ctx->dims.cp_enabled()) {
    batch_dims.push_back("cp");
    ctx->mesh->flatten(batch_dims, "dp_cp");
    // FSDP's group (torchtitan's name); HSDP with dp_shard 1 has no dp_shard dimension.
    std::vector<std::string> shard_dims{"cp"};
    if (std::find(names.begin(), names.end(), "dp_shard") != names.end()) shard_dims.insert(shard_dims.begin(), "dp_shard");
    ctx->mesh->flatten(shard_dims, "dp_shard_cp");
  }
  if (ctx->dims.pp_enabled()) {
    // The ranks whose losses add up to the step's loss: ranks without the last stage add 0.
    auto loss_dims = batch_dims;
    loss_dims.insert(loss_dims.begin(), "pp");
    ctx->mesh->flatten(loss_dims, "loss");
  }
  if (alone) {
    ctx->mesh->create_local_groups(timeout);
    return ctx;
  }
  ctx->mesh->create_groups(ctx->store, timeout);
  spdlog::info("rank {}/{} joined ({} launcher, restart round {}); mesh {}", env.rank, env.world_size, env.source,
               env.restart_count, fmt::format("{}", fmt::join(names, " x ")));
  return ctx;
}

}  // namespace ctitan::distributed
