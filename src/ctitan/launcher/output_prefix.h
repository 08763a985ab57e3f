#pragma once
// One rank's output as `ctitan run` shows it. The worker's stdout and stderr arrive on pipes in
// arbitrary chunks; RankOutput cuts them into lines and hands each whole line to
//   - the console (the launcher's stdout or stderr), prefixed "[rankN]:", for the streams in
//     `console_streams` (filtered-out ranks and redirected streams have none);
//   - the rank's log file, unprefixed, for the streams in `file_streams`;
//   - a ring of the last lines, for the failure summary.
// A line is written with one write(2), so lines of different ranks never interleave mid-line.
#include <deque>
#include <string>
#include <string_view>

namespace ctitan::launcher {

class RankOutput {
 public:
  static constexpr size_t kTailLines = 10;
  // A line longer than this is cut: a worker printing without newlines must not grow memory.
  static constexpr size_t kMaxLine = 64 * 1024;

  // Stream masks: 1 = stdout, 2 = stderr. The log file is created only when `file_streams` is not
  // 0 (then `log_path` must be set). Throws IoError when it cannot be created.
  RankOutput(int rank, int console_streams, int file_streams, const std::string& log_path);
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  // Reads what `fd` has without blocking (`stream`: 0 = stdout, 1 = stderr). Returns false at
  // end of file or on a read error: the caller closes the descriptor.
  bool read_from(int fd, int stream);
  // Emits the unterminated last line of each stream, as if it ended with a newline.
  void flush();

  int rank() const { return rank_; }
  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void feed(int stream, std::string_view data);
  void emit(int stream, std::string_view line);

  int rank_;
  int console_streams_, file_streams_;
  int log_fd_ = -1;
  std::string prefix_;         // "[rankN]:"
  std::string partial_[2];     // bytes after the last newline, per stream
  std::deque<std::string> tail_;
};

}  // namespace ctitan::launcher
