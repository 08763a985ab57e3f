#pragma once
// FolderLock: one run per output folder. Holds an exclusive flock on `<folder>/.ctitan.lock` for
// its lifetime, so a second run started on the same job.dump_folder is refused at once instead of
// both exiting 0 with one's metrics and checkpoints lost. The kernel drops the lock when its
// holder dies, however it dies, so a crashed run never leaves a stale lock behind. On a
// filesystem without flock (Lustre without -o flock, NFSv3 without lockd) it warns and holds none.
#include <filesystem>
#include <string>

namespace ctitan {

class FolderLock {
 public:
  // Creates `folder` if needed and takes its lock. An InputError (exit 2) naming `key`, the folder
  // and the holder ("pid 123 on host") when another process holds it; an IoError when the lock
  // file cannot be created.
  FolderLock(const std::filesystem::path& folder, const std::string& key);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ctitan
