#pragma once
// CommError: a collective that failed or did not finish in time. The message is one line naming
// the collective, its sequence number, the group, this rank and the payload, e.g.
//   collective timeout: all_reduce #17 on group 'dp' (rank 1 of 2, 1048576 x float) did not complete within 5s
// After a CommError the group is unusable (its ranks disagree on what was issued); exit.
#include <stdexcept>
#include <string>

namespace ctitan::distributed {

class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ctitan::distributed
