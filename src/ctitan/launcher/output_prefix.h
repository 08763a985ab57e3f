#pragma once
// One rank's output as `ctitan run` shows it. The worker's stdout and stderr arrive on pipes in
// arbitrary chunks; RankOutput cuts them into lines and hands each whole line to
//   - the console (the launcher's stdout or stderr), prefixed "[rankN]:", unless filtered out;
//   - the rank's log file, unprefixed, when --log-dir is set;
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

  // `log_path` empty: no log file. Throws InputError when the log file cannot be created.
  RankOutput(int rank, bool to_console, const std::string& log_path);
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
  bool to_console_;
  int log_fd_ = -1;
  std::string prefix_;         // "[rankN]:"
  std::string partial_[2];     // bytes after the last newline, per stream
  std::deque<std::string> tail_;
};

}  // namespace ctitan::launcher
