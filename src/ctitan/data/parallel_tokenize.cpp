#include "ctitan/data/parallel_tokenize.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "ctitan/common/error.h"
#include "ctitan/data/token_stream.h"

namespace ctitan::data {
namespace fs = std::filesystem;
namespace {

// Enough text per batch that handing it to a thread costs little next to tokenizing it, and a
// cap on documents so that millions of empty ones still make bounded batches.
constexpr size_t kBatchTextBytes = size_t(1) << 20;
constexpr size_t kBatchDocuments = 16384;

struct DocumentBatch {
  std::vector<std::string> documents;
  std::vector<std::optional<std::vector<int32_t>>> ids;  // one per document; nullopt = blank
  bool done = false;
  std::exception_ptr error;

  void tokenize(const Tokenizer& tokenizer) {
    ids.reserve(documents.size());
    for (const auto& doc : documents) ids.push_back(encode_document(tokenizer, doc));
    documents.clear();
  }
};

// Reads every file's documents in order and cuts them into batches.
class DocumentBatchReader {
 public:
  DocumentBatchReader(const std::vector<DatasetFile>& files, const DocumentOptions& options)
      : files_(files), options_(options) {}

  std::shared_ptr<DocumentBatch> next() {
    auto batch = std::make_shared<DocumentBatch>();
    size_t bytes = 0;
    while (bytes < kBatchTextBytes && batch->documents.size() < kBatchDocuments) {
      if (!reader_) {
        if (next_file_ >= files_.size()) break;
        reader_ = open_documents(files_[next_file_++], options_);
      }
      auto doc = reader_->next();
      if (!doc) {
        reader_.reset();
        continue;
      }
      bytes += doc->size();
      batch->documents.push_back(std::move(*doc));
    }
    return batch->documents.empty() ? nullptr : batch;
  }

 private:
  const std::vector<DatasetFile>& files_;
  DocumentOptions options_;
  size_t next_file_ = 0;
  std::unique_ptr<DocumentReader> reader_;
};

// Worker threads that tokenize whatever batch is queued; the owner waits on each batch's `done`.
class TokenizerPool {
 public:
  TokenizerPool(const Tokenizer& tokenizer, int workers) : tokenizer_(tokenizer) {
    try {
      for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
    } catch (const std::system_error& e) {
      stop();  // the threads already started must not outlive a failed construction
      throw IoError("data prepare: could not start " + std::to_string(workers) + " tokenizer threads (--workers): " +
                    e.what());
    } catch (...) {
      stop();
      throw;
    }
  }
  // Also on an exception in the reader: the threads are stopped and joined, never left running.
  ~TokenizerPool() { stop(); }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    queued_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }

  void submit(std::shared_ptr<DocumentBatch> batch) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(batch));
    }
    queued_.notify_one();
  }

  void wait(DocumentBatch& batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return batch.done; });
    if (batch.error) std::rethrow_exception(batch.error);
  }

 private:
  void work() {
    while (true) {
      std::shared_ptr<DocumentBatch> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        batch->tokenize(tokenizer_);
      } catch (...) {
        batch->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        batch->done = true;
      }
      finished_.notify_all();
    }
  }

  const Tokenizer& tokenizer_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable queued_, finished_;
  std::deque<std::shared_ptr<DocumentBatch>> queue_;
  bool stopping_ = false;
};

}  // namespace

TokenizeCounts tokenize_in_order(const std::vector<DatasetFile>& files, const DocumentOptions& options,
                                 const Tokenizer& tokenizer, int workers,
                                 const std::function<void(const std::vector<int32_t>&)>& sink,
                                 const std::function<void(const TokenizeCounts&)>& on_progress) {
  TokenizeCounts counts;
  auto emit = [&](DocumentBatch& batch) {
    counts.documents += int64_t(batch.ids.size());
    for (const auto& ids : batch.ids) {
      if (!ids) continue;
      counts.tokens += int64_t(ids->size());
      sink(*ids);
    }
    if (on_progress) on_progress(counts);
  };
  DocumentBatchReader reader(files, options);
  if (workers <= 1) {
    while (auto batch = reader.next()) {
      batch->tokenize(tokenizer);
      emit(*batch);
    }
    return counts;
  }
  // Two batches per worker in flight: one being tokenized, one queued, so no worker idles while
  // the reader fills the next, and memory stays bounded whatever the dataset's size.
  const size_t max_in_flight = 2 * size_t(workers);
  TokenizerPool pool(tokenizer, workers);
  std::deque<std::shared_ptr<DocumentBatch>> in_flight;
  auto emit_oldest = [&] {
    pool.wait(*in_flight.front());
    emit(*in_flight.front());
    in_flight.pop_front();
  };
  while (auto batch = reader.next()) {
    pool.submit(batch);
    in_flight.push_back(std::move(batch));
    if (in_flight.size() >= max_in_flight) emit_oldest();
  }
  while (!in_flight.empty()) emit_oldest();
  return counts;
}

}  // namespace ctitan::data
