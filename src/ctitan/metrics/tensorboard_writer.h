#pragma once
// Scalars in TensorBoard's event-file format, written without TensorFlow or protobuf: the file is
// a sequence of records (uint64 length, masked CRC-32C of the length, an Event protobuf, masked
// CRC-32C of the Event), and the few Event / Summary fields a scalar needs are encoded by hand.
// TensorBoard, tensorboardX and torch.utils.tensorboard read the result like their own.
#include <cstdint>
#include <fstream>
#include <string>

namespace ctitan::metrics {

// CRC-32C (Castagnoli), as TFRecord frames use it, and the masking TFRecord applies to it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates `dir` and events.out.tfevents.<seconds>.<host>.<pid>.0 in it, opened with the
  // file_version event TensorBoard expects first. Throws IoError naming the file.
  explicit TensorBoardWriter(const std::string& dir);

  // One scalar point (Summary.Value.simple_value, a float) of `tag` at `step`.
  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace ctitan::metrics
