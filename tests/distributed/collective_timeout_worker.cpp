// A worker for the timeout test, started on every rank by `ctitan run --exec` (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT from the launcher). Rank 0 skips the second all_reduce on purpose; every
// other rank must fail with the one-line timeout CommError within `timeout_seconds` (argv[1]).
// Rank 0 waits until they all reported it through the store, then exits 0; they exit 1.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/store.h"

namespace {

using namespace ctitan::distributed;

int run(double timeout_seconds) {
  auto env = read_dist_env();
  auto store = connect_store(env, std::chrono::seconds(60));
  auto world = Communicator::create(store, "world", env.rank, env.world_size, std::chrono::seconds(60));
  auto t = torch::ones({1024});
  world->all_reduce(t, ReduceOp::kSum);  // connected and working
  const auto timeout = std::chrono::milliseconds(int64_t(timeout_seconds * 1000));
  world->set_timeout(timeout);
  if (world->rank() == 0) {
    fmt::print("rank 0 skips all_reduce #{} on purpose\n", world->sequence_number() + 1);
    std::fflush(stdout);
    std::vector<std::string> keys;
    for (int r = 1; r < world->size(); ++r) keys.push_back(fmt::format("timeout_seen/{}", r));
    store->wait(keys, timeout * 4 + std::chrono::seconds(30));
    fmt::print("every other rank reported the timeout\n");
    return 0;
  }
  try {
    world->all_reduce(t, ReduceOp::kSum);
  } catch (const CommError& e) {
    fmt::print(stderr, "collective_timeout_worker: error: {}\n", e.what());
    std::fflush(stderr);
    store->set(fmt::format("timeout_seen/{}", world->rank()), std::vector<uint8_t>{1});
    return 1;
  }
  fmt::print(stderr, "collective_timeout_worker: the skipped all_reduce completed; expected a timeout\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc > 1 ? std::stod(argv[1]) : 3.0);
  } catch (const std::exception& e) {
    fmt::print(stderr, "collective_timeout_worker: unexpected error: {}\n", e.what());
    return 3;
  }
}
