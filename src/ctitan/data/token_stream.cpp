#include "ctitan/data/token_stream.h"

#include <fmt/format.h>

#include "ctitan/common/error.h"
#include "ctitan/data/documents.h"
#include "ctitan/data/token_file.h"

namespace ctitan::data {
namespace fs = std::filesystem;
namespace {

// Text and JSONL files, one tokenized document per chunk. Position = global document index.
// Files stream: only the current document is in memory.
class DocumentStream : public TokenStream {
 public:
  DocumentStream(std::vector<DatasetFile> files, std::shared_ptr<const Tokenizer> tok, DocumentOptions options,
                 std::string key)
      : files_(std::move(files)), tokenizer_(std::move(tok)), options_(std::move(options)), key_(std::move(key)) {}

  std::optional<std::vector<int32_t>> next() override {
    while (auto doc = next_document()) {
      if (auto ids = encode_document(*tokenizer_, *doc)) return ids;
    }
    return std::nullopt;
  }

  int64_t position() const override { return position_; }

  // Resuming passes over the documents before `target` without tokenizing them: text and JSONL
  // have no index on disk (and compressed files cannot be entered in the middle), so they are
  // read forward; Parquet passes whole row groups by their metadata.
  void seek(int64_t target) override {
    next_file_ = 0;
    reader_.reset();
    position_ = 0;
    while (position_ < target) {
      if (!reader_) {
        if (next_file_ >= files_.size()) {
          throw InputError(fmt::format("dataset error: {}: cannot resume at document {}: the dataset has only {}",
                                       key_, target, position_));
        }
        reader_ = open_documents(files_[next_file_++], options_);
      }
      const int64_t skipped = reader_->skip(target - position_);
      position_ += skipped;
      if (position_ < target) reader_.reset();  // this file ended
    }
  }

 private:
  std::optional<std::string> next_document() {
    while (true) {
      if (reader_) {
        if (auto doc = reader_->next()) {
          ++position_;
          return doc;
        }
        reader_.reset();
      }
      if (next_file_ >= files_.size()) return std::nullopt;
      reader_ = open_documents(files_[next_file_++], options_);
    }
  }

  std::vector<DatasetFile> files_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  DocumentOptions options_;
  std::string key_;
  size_t next_file_ = 0;
  std::unique_ptr<DocumentReader> reader_;
  int64_t position_ = 0;
};

// Token files read in slices. Position = global token offset over all files.
class TokenFilesStream : public TokenStream {
 public:
  explicit TokenFilesStream(const std::vector<fs::path>& files) {
    for (const auto& f : files) readers_.push_back(std::make_unique<TokenFileReader>(f.string()));
  }

  std::optional<std::vector<int32_t>> next() override {
    constexpr int64_t kSlice = 1 << 16;
    int64_t offset = position_;
    for (auto& reader : readers_) {
      if (offset < reader->size()) {
        auto tokens = reader->read(offset, kSlice);
        position_ += int64_t(tokens.size());
        return tokens;
      }
      offset -= reader->size();
    }
    return std::nullopt;
  }

  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }

 private:
  std::vector<std::unique_ptr<TokenFileReader>> readers_;
  int64_t position_ = 0;
};

}  // namespace

StateDict TokenStream::state_dict() const { return {{"stream_position", scalar_state(position())}}; }

void TokenStream::load_state_dict(const StateDict& state) {
  // A mixture's draw count is no document index: resuming it here would start at the wrong place.
  if (state.count("mixture.sources")) {
    throw InputError("checkpoint error: the data loader's state is a mixture's ([[training.datasets]]); "
                     "this run reads one dataset (training.dataset_path)");
  }
  seek(require_state(state, "stream_position").item<int64_t>());
}

std::optional<std::vector<int32_t>> encode_document(const Tokenizer& tokenizer, const std::string& text) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return std::nullopt;
  return tokenizer.encode(text, /*bos=*/true, /*eos=*/true);
}

std::unique_ptr<TokenStream> open_token_stream(const std::string& path, const std::string& format,
                                               std::shared_ptr<const Tokenizer> tokenizer, const std::string& key,
                                               const DocumentOptions& options) {
  return open_token_stream(list_dataset_files(path, format, key), std::move(tokenizer), key, options);
}

std::unique_ptr<TokenStream> open_token_stream(std::vector<DatasetFile> files, std::shared_ptr<const Tokenizer> tokenizer,
                                               const std::string& key, const DocumentOptions& options) {
  if (files.front().format->tokens) {
    std::vector<fs::path> token_files;
    for (const auto& file : files) token_files.push_back(file.path);
    return std::make_unique<TokenFilesStream>(token_files);
  }
  if (!tokenizer) throw InputError(fmt::format("dataset error: {} holds text; set model.tokenizer_path", key));
  return std::make_unique<DocumentStream>(std::move(files), std::move(tokenizer), options, key);
}

}  // namespace ctitan::data
