// A worker for the timeout test, started on every rank by `ctitan run --exec` (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT from the launcher). Rank 0 skips the second all_reduce on purpose; every
// other rank must fail with the one-line timeout CommError within `timeout_seconds` (argv[1]).
// Every rank waits until all the others reported it through the store; then rank 0 exits 0 and
// the others exit 1.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/store.h"

namespace {

using namespace ctitan::distributed;

// The keys ranks 1 .. N-1 set once they saw their timeout.
std::vector<std::string> seen_keys(int world_size) {
  std::vector<std::string> keys;
  for (int r = 1; r < world_size; ++r) keys.push_back(fmt::format("timeout_seen/{}", r));
  return keys;
}

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
    store->wait(seen_keys(world->size()), timeout * 4 + std::chrono::seconds(30));
    fmt::print("every other rank reported the timeout\n");
    return 0;
  }
  try {
    world->all_reduce(t, ReduceOp::kSum);
  } catch (const CommError& e) {
    fmt::print(stderr, "collective_timeout_worker: error: {}\n", e.what());
    std::fflush(stderr);
    store->set(fmt::format("timeout_seen/{}", world->rank()), std::vector<uint8_t>{1});
    // Exit only once every waiting rank has printed its error: the launcher stops the other
    // workers as soon as one fails, and each rank's line is what the test checks.
    store->wait(seen_keys(world->size()), timeout * 4 + std::chrono::seconds(30));
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
