#include "support/thread_ranks.h"

#include <exception>
#include <thread>

namespace ctitan::testing {

std::vector<std::string> on_thread_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(n), std::string());
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        if (errors[size_t(r)].empty()) errors[size_t(r)] = "exception with an empty message";
      }
    });
  }
  for (auto& t : ranks) t.join();
  return errors;
}

std::string rank_errors(const std::vector<std::string>& per_rank) {
  std::string out;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (!per_rank[r].empty()) out += "rank " + std::to_string(r) + ": " + per_rank[r] + "\n";
  }
  return out;
}

}  // namespace ctitan::testing
