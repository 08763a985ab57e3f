// Parquet through Apache Arrow's C++ reader (the pyarrow wheel's libparquet): the low-level
// column reader, not Arrow tables, so memory is one page of one column at a time.
#include "ctitan/data/parquet_documents.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <parquet/api/reader.h>
#include <parquet/exception.h>

#include <algorithm>

#include "ctitan/common/error.h"

namespace ctitan::data {
namespace fs = std::filesystem;
namespace {

// Pages are read through a buffer of this size rather than a whole column chunk at once (Arrow's
// default), which would hold a row group's column in memory: a 1 GB row group is not unusual.
constexpr int64_t kReadBufferBytes = int64_t(1) << 20;

class ParquetDocumentReader : public DocumentReader {
 public:
  ParquetDocumentReader(const fs::path& file, const DocumentOptions& options) : file_(file) {
    guarded([&] {
      parquet::ReaderProperties props = parquet::default_reader_properties();
      props.enable_buffered_stream();
      props.set_buffer_size(kReadBufferBytes);
      reader_ = parquet::ParquetFileReader::OpenFile(file.string(), /*memory_map=*/false, props);
      metadata_ = reader_->metadata();
      const parquet::SchemaDescriptor* schema = metadata_->schema();
      column_ = schema->ColumnIndex(options.text_column);
      if (column_ < 0 && schema->group_node()->FieldIndex(options.text_column) >= 0) {  // a list or a struct
        throw InputError(fmt::format("dataset error: {}: column '{}' is nested (a list or a struct), not one string "
                                     "per row", file.string(), options.text_column));
      }
      if (column_ < 0) {
        std::vector<std::string> names;
        for (int i = 0; i < schema->num_columns(); ++i) names.push_back(schema->Column(i)->path()->ToDotString());
        throw InputError(fmt::format("dataset error: {}: no text column '{}'; its columns: {}",
                                     file.string(), options.text_column, fmt::join(names, ", ")));
      }
      const parquet::ColumnDescriptor* column = schema->Column(column_);
      // A string inside a list ("texts.list.element") has many values per row: reading counts
      // values, skipping counts rows, and positions would mean two things.
      if (column->max_repetition_level() > 0) {
        throw InputError(fmt::format("dataset error: {}: column '{}' is inside a list, not one string per row",
                                     file.string(), options.text_column));
      }
      const bool is_string = column->physical_type() == parquet::Type::BYTE_ARRAY &&
                             (column->logical_type()->is_string() ||
                              column->converted_type() == parquet::ConvertedType::UTF8);
      if (!is_string) {
        throw InputError(fmt::format("dataset error: {}: column '{}' holds {} {}, not one string per row", file.string(),
                                     options.text_column, parquet::TypeToString(column->physical_type()),
                                     column->logical_type()->ToString()));
      }
    });
  }

  std::optional<std::string> next() override {
    return guarded([&]() -> std::optional<std::string> {
      while (rows_left_ == 0) {
        if (!open_next_row_group()) return std::nullopt;
      }
      int16_t definition_level = 0;
      parquet::ByteArray value;
      int64_t values_read = 0;
      const int64_t levels = column_reader_->ReadBatch(1, &definition_level, nullptr, &value, &values_read);
      if (levels != 1) throw_short_row_group();
      --rows_left_;
      if (values_read == 0) return std::string();  // a null: an empty document, skipped by the loader
      return std::string(reinterpret_cast<const char*>(value.ptr), value.len);
    });
  }

  int64_t skip(int64_t n) override {
    return guarded([&] {
      int64_t skipped = 0;
      while (skipped < n) {
        if (rows_left_ == 0) {
          // Whole row groups by their metadata: no page of them is read.
          while (next_row_group_ < metadata_->num_row_groups() &&
                 metadata_->RowGroup(next_row_group_)->num_rows() <= n - skipped) {
            skipped += metadata_->RowGroup(next_row_group_++)->num_rows();
          }
          if (skipped == n || !open_next_row_group()) break;
        }
        const int64_t k = column_reader_->Skip(std::min(n - skipped, rows_left_));
        if (k == 0) throw_short_row_group();
        skipped += k;
        rows_left_ -= k;
      }
      return skipped;
    });
  }

 private:
  bool open_next_row_group() {
    if (next_row_group_ >= metadata_->num_row_groups()) return false;
    row_group_ = reader_->RowGroup(next_row_group_);
    rows_left_ = row_group_->metadata()->num_rows();
    column_reader_ = std::static_pointer_cast<parquet::ByteArrayReader>(row_group_->Column(column_));
    ++next_row_group_;
    return true;
  }

  [[noreturn]] void throw_short_row_group() const {
    throw InputError(fmt::format("dataset error: {}: row group {} holds fewer values than its {} rows", file_.string(),
                                 next_row_group_ - 1, row_group_->metadata()->num_rows()));
  }

  // Arrow reports a bad file (not Parquet, a truncated footer, a corrupt page) with its own
  // exceptions: one InputError naming the file instead.
  template <typename F>
  auto guarded(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      std::string what = e.what();
      std::replace(what.begin(), what.end(), '\n', ' ');
      throw InputError(fmt::format("dataset error: {}: not a readable Parquet file: {}", file_.string(), what));
    }
  }

  fs::path file_;
  std::unique_ptr<parquet::ParquetFileReader> reader_;
  std::shared_ptr<parquet::FileMetaData> metadata_;
  int column_ = -1;
  int next_row_group_ = 0;
  std::shared_ptr<parquet::RowGroupReader> row_group_;
  std::shared_ptr<parquet::ByteArrayReader> column_reader_;
  int64_t rows_left_ = 0;  // in the open row group
};

}  // namespace

std::string parquet_unavailable_reason() { return ""; }

std::unique_ptr<DocumentReader> open_parquet_documents(const fs::path& file, const DocumentOptions& options) {
  return std::make_unique<ParquetDocumentReader>(file, options);
}

}  // namespace ctitan::data
