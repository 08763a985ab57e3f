#include "ctitan/common/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ctitan/common/error.h"

namespace ctitan {
namespace {

void fsync_path(const std::filesystem::path& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw IoError(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw IoError(fmt::format("fsync {}: {}", path.string(), std::strerror(err)));
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  auto tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw IoError(fmt::format("cannot create {}: {}", tmp.string(), std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError(fmt::format("writing {}: {}", tmp.string(), std::strerror(err)));
    }
    done += size_t(n);
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) {
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("fsync {}: {}", tmp.string(), std::strerror(err)));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
  }
  const auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  fsync_path(dir, O_RDONLY | O_DIRECTORY);  // makes the rename itself durable
}

}  // namespace ctitan
