#include "ctitan/common/threads.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <string>
#include <thread>

namespace ctitan {

int configure_threads() {
  int n = int(std::thread::hardware_concurrency());
  for (const char* var : {"OMP_NUM_THREADS", "CTITAN_NUM_THREADS"}) {
    if (const char* v = std::getenv(var)) {
      int parsed = std::atoi(v);
      if (parsed > 0) n = parsed;
    }
  }
  at::set_num_threads(n > 0 ? n : 1);
  return at::get_num_threads();
}

}  // namespace ctitan
