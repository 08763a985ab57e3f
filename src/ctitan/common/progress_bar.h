#pragma once
// A one-line progress bar on stderr for long commands (tokenizer training, data prepare, export,
// import, checkpoint verification). Drawn only when stderr is a terminal: piped or logged output
// (CI, `ctitan run`, files) stays free of carriage returns.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ctitan {

class ProgressBar {
 public:
  // `total` <= 0: unknown, only the count is shown. `unit` names what is counted ("merges").
  ProgressBar(std::string unit, int64_t total, bool enabled = isatty(STDERR_FILENO) != 0)
      : unit_(std::move(unit)), total_(total), enabled_(enabled) {}
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(int64_t done) {
    done_ = done;
    if (!enabled_) return;
    // Redrawing on every item could cost more than the item; 10 times a second looks smooth.
    auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw();
  }
  void add(int64_t n = 1) { update(done_ + n); }

  // Draws the final state and ends the line (once).
  void finish() {
    if (!enabled_ || finished_) return;
    finished_ = true;
    draw();
    std::fputc('\n', stderr);
  }

 private:
  void draw() const {
    if (total_ > 0) {
      constexpr int64_t kWidth = 30;
      const int64_t filled = kWidth * std::min(done_, total_) / total_;
      const std::string bar = std::string(size_t(filled), '#') + std::string(size_t(kWidth - filled), '.');
      std::fprintf(stderr, "\r[%s] %lld/%lld %s", bar.c_str(), static_cast<long long>(done_),
                   static_cast<long long>(total_), unit_.c_str());
    } else {
      std::fprintf(stderr, "\r%lld %s", static_cast<long long>(done_), unit_.c_str());
    }
    std::fflush(stderr);
  }

  std::string unit_;
  int64_t total_;
  bool enabled_;
  int64_t done_ = 0;
  bool finished_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace ctitan
