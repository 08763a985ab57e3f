#pragma once
// Writes one rank's slices into its data file, checksumming each on the way to disk.
#include <filesystem>
#include <string>
#include <vector>

#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/save_plan.h"

namespace ctitan::checkpoint {

std::string rank_file_name(int rank);  // "rank-00003.bin"

// Writes every slice's raw bytes (contiguous, native byte order) into step_dir/rank_file_name(rank),
// fsyncs it, and returns where each slice went. A failed write (ENOSPC, EIO, ...) removes the file
// and throws InputError naming it and the OS error.
std::vector<SliceEntry> write_rank_file(const std::filesystem::path& step_dir, int rank,
                                        const std::vector<LocalSlice>& slices);

}  // namespace ctitan::checkpoint
