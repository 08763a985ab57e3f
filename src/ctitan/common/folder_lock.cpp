#include "ctitan/common/folder_lock.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ctitan/common/error.h"

namespace ctitan {
namespace {

std::string this_process() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("pid {} on {}", ::getpid(), host);
}

// What the holder wrote into the lock file, or "another process" if it has not written yet.
std::string holder_of(int fd) {
  char text[300] = {0};
  const auto n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder(text, n > 0 ? size_t(n) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder.empty() ? "another process" : holder;
}

}  // namespace

FolderLock::FolderLock(const std::filesystem::path& folder, const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  const auto path = folder / ".ctitan.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw IoError(fmt::format("{} '{}': cannot create its lock file {}: {}", key, folder.string(), path.string(),
                              std::strerror(errno)));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const auto holder = error == EWOULDBLOCK ? holder_of(fd_) : std::string();
    ::close(fd_);
    fd_ = -1;
    if (error == ENOSYS || error == ENOLCK || error == EOPNOTSUPP) {
      // Lustre without -o flock, NFSv3 without a lock daemon: running unlocked beats refusing to run.
      spdlog::warn("{} '{}': this filesystem does not lock files ({}); a second run on the folder would not be "
                   "refused", key, folder.string(), std::strerror(error));
      return;
    }
    if (error == EWOULDBLOCK) {
      throw InputError(fmt::format("{} '{}' is in use by another run ({}): wait for it to end, or give another {}",
                                   key, folder.string(), holder, key),
                       2);
    }
    throw IoError(fmt::format("{} '{}': cannot lock {}: {}", key, folder.string(), path.string(), std::strerror(error)));
  }
  const auto me = this_process() + "\n";
  // Best effort: the lock itself is the flock; the text only names the holder in the refusal.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] auto written = ::pwrite(fd_, me.data(), me.size(), 0);
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace ctitan
