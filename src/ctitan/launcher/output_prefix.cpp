#include "ctitan/launcher/output_prefix.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ctitan/common/error.h"

namespace ctitan::launcher {
namespace {

// Console or log file errors (a closed terminal, a full disk) drop the line, never the worker.
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(size_t(n));
  }
}

}  // namespace

RankOutput::RankOutput(int rank, int console_streams, int file_streams, const std::string& log_path)
    : rank_(rank), console_streams_(console_streams), file_streams_(file_streams),
      prefix_(fmt::format("[rank{}]:", rank)) {
  if (file_streams_ != 0) {
    log_fd_ = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd_ < 0) {
      throw IoError(fmt::format("run: cannot write log file {}: {}", log_path, std::strerror(errno)));
    }
  }
}

RankOutput::~RankOutput() {
  flush();
  if (log_fd_ >= 0) close(log_fd_);
}

bool RankOutput::read_from(int fd, int stream) {
  char buf[16384];
  // Bounded per call, so that one chatty rank cannot starve the others' pipes.
  for (int i = 0; i < 64; ++i) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      feed(stream, std::string_view(buf, size_t(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // end of file, or an error that will not go away
  }
  return true;
}

void RankOutput::feed(int stream, std::string_view data) {
  std::string& partial = partial_[stream];
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial.append(data);
      break;
    }
    partial.append(data.substr(0, nl));
    emit(stream, partial);
    partial.clear();
    data.remove_prefix(nl + 1);
  }
  if (partial.size() >= kMaxLine) {
    emit(stream, partial);
    partial.clear();
  }
}

void RankOutput::flush() {
  for (int stream = 0; stream < 2; ++stream) {
    if (partial_[stream].empty()) continue;
    emit(stream, partial_[stream]);
    partial_[stream].clear();
  }
}

void RankOutput::emit(int stream, std::string_view line) {
  const int bit = stream == 0 ? 1 : 2;
  if (console_streams_ & bit) {
    std::string out;
    out.reserve(prefix_.size() + line.size() + 1);
    out.append(prefix_).append(line).push_back('\n');
    write_all(stream == 0 ? STDOUT_FILENO : STDERR_FILENO, out);
  }
  if (log_fd_ >= 0 && (file_streams_ & bit)) {
    std::string out(line);
    out.push_back('\n');
    write_all(log_fd_, out);
  }
  tail_.emplace_back(line);
  if (tail_.size() > kTailLines) tail_.pop_front();
}

}  // namespace ctitan::launcher
