#include "ctitan/common/output_target.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "ctitan/common/error.h"
#include "ctitan/common/path_text.h"

namespace ctitan {

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_output_file(const std::string& flag, const std::filesystem::path& target, bool overwrite,
                       const std::vector<std::filesystem::path>& inputs) {
  for (const auto& input : inputs) {
    if (same_file(target, input)) {
      throw InputError(fmt::format("{} {} is also an input ({}): write the output elsewhere", flag, target.string(),
                                   input.string()));
    }
  }
  struct stat st {};
  if (::lstat(target.c_str(), &st) != 0) return;  // nothing there yet
  if (!S_ISREG(st.st_mode)) {
    throw InputError(fmt::format("{} {} exists and is not a regular file ({}); ctitan replaces only regular files",
                                 flag, target.string(), S_ISLNK(st.st_mode) ? "a symbolic link" : "a device, FIFO or directory"));
  }
  if (!overwrite) {
    throw InputError(fmt::format("{} {} already exists; pass --overwrite to replace it", flag, target.string()));
  }
}

void check_writable_folder(const std::string& key, const std::filesystem::path& folder) {
  const auto fail = [&](const std::string& why) {
    throw IoError(fmt::format("{} '{}'{} is not writable: {}", key, folder.string(), relative_path_note(folder.string()),
                              why));
  };
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) fail(ec.message());
  if (!std::filesystem::is_directory(folder, ec)) fail("not a directory");
  // Per process: ranks sharing the folder probe at once, from hosts whose pids may coincide.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto probe = folder / fmt::format(".ctitan-write-probe-{}-{}-{:x}", host, ::getpid(), std::random_device()());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail(std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace ctitan
