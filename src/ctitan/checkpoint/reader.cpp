#include "ctitan/checkpoint/reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ctitan/checkpoint/checksum.h"
#include "ctitan/common/error.h"
#include "ctitan/common/progress_bar.h"

namespace ctitan::checkpoint {
namespace {

int64_t rows_of(const std::vector<int64_t>& shape) { return shape.empty() ? 1 : shape[0]; }

}  // namespace

CheckpointReader::CheckpointReader(std::filesystem::path step_dir)
    : step_dir_(std::move(step_dir)), metadata_(read_metadata(step_dir_)) {}

std::vector<const SliceEntry*> CheckpointReader::entries_of(const std::string& part, const std::string& key,
                                                            int rank) const {
  std::vector<const SliceEntry*> out;
  for (const auto& e : metadata_.entries) {
    if (e.part == part && e.key == key && e.rank == rank) out.push_back(&e);
  }
  if (out.empty()) {
    throw InputError(fmt::format("checkpoint error: {} holds no tensor {}/{}{}", step_dir_.string(), part, key,
                                 rank >= 0 ? fmt::format(" of rank {}", rank) : ""));
  }
  return out;
}

std::vector<std::string> CheckpointReader::keys(const std::string& part, int rank) const {
  std::vector<std::string> out;
  for (const auto& e : metadata_.entries) {
    if (e.part == part && e.rank == rank && (out.empty() || out.back() != e.key)) out.push_back(e.key);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

torch::Tensor CheckpointReader::read_entry(const SliceEntry& e) {
  auto path = step_dir_ / e.file;
  auto where = fmt::format("{} ({}/{} rows {}..{})", path.string(), e.part, e.key, e.row_offset,
                           e.row_offset + rows_of(e.shape));
  auto dtype = entry_dtype(e.dtype, path.string());
  auto t = torch::empty(e.shape, torch::TensorOptions(dtype));
  if (int64_t(t.nbytes()) != e.nbytes) {
    throw InputError(fmt::format("checkpoint error: {}: metadata says {} bytes for shape {}", where, e.nbytes,
                                 fmt::join(e.shape, "x")));
  }
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw InputError(fmt::format("checkpoint error: cannot open {}: {}", where, std::strerror(errno)));
  auto* out = static_cast<char*>(t.data_ptr());
  int64_t done = 0;
  while (done < e.nbytes) {
    ssize_t n = ::pread(fd, out + done, size_t(e.nbytes - done), off_t(e.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      if (n == 0) throw InputError(fmt::format("checkpoint error: {} is truncated: {} of {} bytes", where, done, e.nbytes));
      throw InputError(fmt::format("checkpoint error: reading {}: {}", where, std::strerror(err)));
    }
    done += n;
  }
  ::close(fd);
  if (crc32(out, size_t(e.nbytes)) != e.crc32) {
    throw InputError(fmt::format("checkpoint error: {}: checksum mismatch (corrupt file)", where));
  }
  return t;
}

void CheckpointReader::read_into(const std::string& part, const std::string& key, torch::Tensor target,
                                 int64_t row_offset, const std::vector<int64_t>& global_shape) {
  auto entries = entries_of(part, key, -1);
  if (entries[0]->global_shape != global_shape) {
    throw InputError(fmt::format("checkpoint error: {}: {}/{} has shape {} but the model expects {}",
                                 step_dir_.string(), part, key, fmt::join(entries[0]->global_shape, "x"),
                                 fmt::join(global_shape, "x")));
  }
  torch::NoGradGuard no_grad;
  if (global_shape.empty()) {  // a 0-d tensor has no rows to slice
    target.copy_(read_entry(*entries[0]));
    return;
  }
  const int64_t begin = row_offset, end = row_offset + target.size(0);
  int64_t covered = 0;
  for (const auto* e : entries) {
    const int64_t lo = std::max(begin, e->row_offset), hi = std::min(end, e->row_offset + rows_of(e->shape));
    if (lo >= hi) continue;
    auto saved = read_entry(*e);  // (rows_e, ...)
    target.narrow(0, lo - begin, hi - lo).copy_(saved.narrow(0, lo - e->row_offset, hi - lo));
    covered += hi - lo;
  }
  if (covered != end - begin) {
    throw InputError(fmt::format("checkpoint error: {}: saved slices of {}/{} cover {} of rows {}..{}",
                                 step_dir_.string(), part, key, covered, begin, end));
  }
}

torch::Tensor CheckpointReader::read_whole(const std::string& part, const std::string& key, int rank) {
  auto entries = entries_of(part, key, rank);
  if (rank >= 0) return read_entry(*entries[0]);  // per-rank tensors are saved whole
  auto t = torch::empty(entries[0]->global_shape,
                        torch::TensorOptions(entry_dtype(entries[0]->dtype, step_dir_.string())));
  read_into(part, key, t, 0, entries[0]->global_shape);
  return t;
}

void CheckpointReader::verify_all() {
  ProgressBar progress("slices verified", int64_t(metadata_.entries.size()));
  for (const auto& e : metadata_.entries) {
    read_entry(e);
    progress.add();
  }
}

}  // namespace ctitan::checkpoint
