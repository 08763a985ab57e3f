#pragma once
// Helpers shared by tests: temporary folders, generated corpora, and running the ctitan binary.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ctitan::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);
// XORs one bit of the byte at offset `at` of `path`: damage that a checksum must catch.
void flip_byte(const std::filesystem::path& path, size_t at);

// Deterministic English-like text generated from a small word list: `n_docs` documents
// separated by strfile "%" lines. Tests never ship third-party text.
std::string generated_corpus(int n_docs, int words_per_doc, unsigned seed = 1);

// 20 documents of 1500 words in several scripts (Latin with accents, CJK, emoji), digits,
// contractions, punctuation and whitespace runs: what tokenizer tests encode and train on.
std::vector<std::string> make_corpus();

// `text` cut into pieces of about `bytes` bytes, each cut moved back to a UTF-8 character
// boundary (JSON, and tokenizers' Python side, need valid UTF-8).
std::vector<std::string> utf8_pieces(const std::string& text, size_t bytes);

// One JSON object per line, as metrics.jsonl.
std::vector<nlohmann::json> read_jsonl(const std::string& path);

// The first training step a run logged on its console ("step:    11  loss: ..."), or -1: where a
// resumed run started, now that metrics.jsonl also keeps the rows of the run it resumed.
int64_t first_logged_step(const std::string& output);

// a followed by b: builds command lines from shared pieces.
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b);

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

// Runs `program args...`, waiting at most `timeout_s` (a hang is a failure, killed).
RunResult run_program(const std::string& program, const std::vector<std::string>& args, int timeout_s = 120);
// `build/bin/ctitan args...`.
RunResult run_ctitan(const std::vector<std::string>& args, int timeout_s = 120);
// The venv's Python (CTITAN_PYTHON: torch, transformers, safetensors, tokenizers), the source of
// independent references. Tests that need it check have_python() first: a build against a user's
// own libtorch may have no venv.
RunResult run_python(const std::vector<std::string>& args, int timeout_s = 300);
bool have_python();
// The environment's CTITAN_BIN, CTITAN_PYTHON and CTITAN_SOURCE_DIR take precedence over the
// paths compiled in: the GPU machine runs these binaries from another folder (scripts/gpu/run.sh).
std::string ctitan_bin();
std::string python_path();
std::string source_dir();

}  // namespace ctitan::testing
