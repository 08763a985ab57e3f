#include "ctitan/checkpoint/writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include "ctitan/checkpoint/checksum.h"
#include "ctitan/common/error.h"

namespace ctitan::checkpoint {
namespace {

// Below this a thread costs more than the checksum it would overlap (zlib: several GB/s).
constexpr int64_t kParallelChecksumBytes = int64_t(1) << 20;

// Closes and removes a half-written file unless released.
class OutputFile {
 public:
  explicit OutputFile(std::filesystem::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  void write(const char* data, size_t bytes) {
    while (bytes > 0) {
      ssize_t n = ::write(fd_, data, std::min<size_t>(bytes, size_t(1) << 26));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) errno = ENOSPC;
        fail("writing");
      }
      data += n;
      bytes -= size_t(n);
    }
  }
  void commit() {
    if (::fsync(fd_) != 0) fail("fsync");
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail("closing");
    committed_ = true;
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw IoError(fmt::format("checkpoint error: {} {}: {}", what, path_.string(), std::strerror(errno)));
  }
  std::filesystem::path path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

std::string rank_file_name(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

std::vector<SliceEntry> write_rank_file(const std::filesystem::path& step_dir, int rank,
                                        const std::vector<LocalSlice>& slices) {
  const std::string file = rank_file_name(rank);
  OutputFile out(step_dir / file);
  std::vector<SliceEntry> entries;
  int64_t offset = 0;
  for (const auto& s : slices) {
    // Device state goes through pinned host memory: one DMA copy, not a pageable bounce per tensor.
    auto t = s.tensor.is_cuda()
                 ? torch::empty(s.tensor.sizes(), torch::TensorOptions(s.tensor.scalar_type()).pinned_memory(true))
                       .copy_(s.tensor.detach())
                 : s.tensor.detach().contiguous();
    const auto nbytes = int64_t(t.nbytes());
    const char* bytes = static_cast<const char*>(t.data_ptr());
    // A large slice is checksummed on a second thread while this one writes the same bytes, so the
    // save costs about max(write, checksum) rather than their sum (bench/checkpoint: 0.55x dd
    // with the checksum first). Both only read `t`, which outlives the future.
    std::future<uint32_t> crc;
    if (nbytes >= kParallelChecksumBytes) {
      crc = std::async(std::launch::async, [bytes, nbytes] { return crc32(bytes, size_t(nbytes)); });
    }
    out.write(bytes, size_t(nbytes));
    const uint32_t checksum = crc.valid() ? crc.get() : crc32(bytes, size_t(nbytes));
    entries.push_back({s.part, s.key, s.rank, entry_dtype_name(t.scalar_type()), s.global_shape, t.sizes().vec(),
                       s.offsets, file, offset, nbytes, checksum});
    offset += nbytes;
  }
  out.commit();
  return entries;
}

}  // namespace ctitan::checkpoint
