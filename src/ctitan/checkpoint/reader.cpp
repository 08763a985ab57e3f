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
  auto where = fmt::format("{} ({}/{} {})", path.string(), e.part, e.key, box_text(e.offsets, e.shape));
  if (e.offsets.size() != e.shape.size() || e.global_shape.size() != e.shape.size()) {
    throw InputError(fmt::format("checkpoint error: {}: offsets, shape and global_shape differ in rank", where));
  }
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
                                 const std::vector<int64_t>& offsets, const std::vector<int64_t>& global_shape) {
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
  const auto ndim = size_t(target.dim());
  int64_t covered = 0;
  for (const auto* e : entries) {
    if (e->offsets.size() != ndim || e->shape.size() != ndim) continue;  // read_entry names it if it overlaps
    // The intersection of the target's box and the saved box, dimension by dimension.
    auto target_part = target, saved_part = torch::Tensor();
    std::vector<std::pair<int64_t, int64_t>> ranges;
    bool empty = false;
    for (size_t d = 0; d < ndim && !empty; ++d) {
      int64_t lo = std::max(offsets[d], e->offsets[d]);
      int64_t hi = std::min(offsets[d] + target.size(int64_t(d)), e->offsets[d] + e->shape[d]);
      empty = lo >= hi;
      ranges.emplace_back(lo, hi);
    }
    if (empty) continue;
    saved_part = read_entry(*e);  // the saved box, e->shape
    int64_t volume = 1;
    for (size_t d = 0; d < ndim; ++d) {
      auto [lo, hi] = ranges[d];
      target_part = target_part.narrow(int64_t(d), lo - offsets[d], hi - lo);
      saved_part = saved_part.narrow(int64_t(d), lo - e->offsets[d], hi - lo);
      volume *= hi - lo;
    }
    target_part.copy_(saved_part);
    covered += volume;
  }
  if (covered != target.numel()) {
    throw InputError(fmt::format("checkpoint error: {}: saved slices of {}/{} cover {} of the {} elements of {}",
                                 step_dir_.string(), part, key, covered, target.numel(),
                                 box_text(offsets, target.sizes().vec())));
  }
}

torch::Tensor CheckpointReader::read_whole(const std::string& part, const std::string& key, int rank) {
  auto entries = entries_of(part, key, rank);
  if (rank >= 0) return read_entry(*entries[0]);  // per-rank tensors are saved whole
  auto t = torch::empty(entries[0]->global_shape,
                        torch::TensorOptions(entry_dtype(entries[0]->dtype, step_dir_.string())));
  read_into(part, key, t, std::vector<int64_t>(entries[0]->global_shape.size(), 0), entries[0]->global_shape);
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
