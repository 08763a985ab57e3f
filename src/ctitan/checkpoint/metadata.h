#pragma once
// The on-disk format of one checkpoint (docs/CHECKPOINT_FORMAT.md): a step directory holds one
// data file per writing rank (rank-RRRRR.bin, raw tensor bytes) and metadata.json, written last
// and atomically by rank 0. A step directory without metadata.json is not a checkpoint.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace ctitan::checkpoint {

inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr int kFormatVersion = 1;

// One saved slice: the box at `offsets` (one per dimension) of extent `shape` inside the tensor
// `part`/`key` whose full shape is global_shape (a whole tensor has offsets all 0 and shape ==
// global_shape). Checkpoints written before TP stored only "row_offset" (dim 0); they still load.
// Parts saved per rank (dataloader, rng) set `rank`; parts shared by all ranks have rank = -1.
struct SliceEntry {
  std::string part, key;
  int rank = -1;
  std::string dtype;  // "float32", "bfloat16", "int64", ... (see dtype_name)
  std::vector<int64_t> global_shape, shape;
  std::vector<int64_t> offsets;
  std::string file;  // relative to the step directory
  int64_t offset = 0, nbytes = 0;
  uint32_t crc32 = 0;
};

// "[lo:hi, lo:hi]": the index ranges of a slice, for messages and `checkpoint inspect`.
std::string box_text(const std::vector<int64_t>& offsets, const std::vector<int64_t>& shape);

struct Metadata {
  int version = kFormatVersion;
  int64_t step = 0;
  bool model_only = false;
  int world_size = 1;
  int dp_degree = 1;
  std::vector<int> dp_rank_of;  // by saving rank
  std::string config_toml;      // the resolved config of the saving job
  std::string config_hash;      // 16 hex digits (FNV-1a 64 of config_toml)
  // data::Tokenizer::fingerprint() of the saving job's tokenizer; empty when it had none (or the
  // checkpoint predates the field): a resume with another tokenizer is refused.
  std::string tokenizer_fingerprint;
  std::vector<SliceEntry> entries;
};

// An entry's "dtype" field (common/dtype_names.h spellings). entry_dtype throws an InputError
// naming `where` for a name it does not know.
std::string entry_dtype_name(torch::ScalarType t);
torch::ScalarType entry_dtype(const std::string& name, const std::string& where);
std::string config_hash(const std::string& config_toml);

nlohmann::json entry_to_json(const SliceEntry& e);
SliceEntry entry_from_json(const nlohmann::json& j);  // throws nlohmann::json::exception
std::string to_json(const Metadata& m);
// Throws InputError naming `where` when the text is not valid metadata.
Metadata metadata_from_json(const std::string& text, const std::string& where);

// Reads step_dir/metadata.json; throws InputError naming the file if it is missing or invalid.
Metadata read_metadata(const std::filesystem::path& step_dir);
// "step-N" for N, and back (nullopt when `name` is not a step directory name).
std::string step_dir_name(int64_t step);
std::optional<int64_t> parse_step_dir_name(const std::string& name);

}  // namespace ctitan::checkpoint
