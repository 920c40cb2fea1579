#pragma once
// Writes TensorBoard event files (tfevents): TFRecord framing with masked CRC-32C, Event protos
// encoded by hand (no protobuf dependency).
//
// TFRecord: uint64 length (LE), uint32 masked_crc32c(length bytes), data, uint32 masked_crc32c(data).
// Event (tensorflow/core/util/event.proto): wall_time = 1 (double), step = 2 (int64),
// file_version = 3 (string), summary = 5 (Summary). Summary: value = 1 (repeated Value).
// Summary.Value: tag = 1 (string), simple_value = 2 (float).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mgt {

class AppendFile;

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), by Boost.CRC.
uint32_t crc32c(const void* data, size_t bytes);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc32c(uint32_t crc);
inline uint32_t masked_crc32c(const void* data, size_t bytes) { return mask_crc32c(crc32c(data, bytes)); }
// One TFRecord around `data`: header, data, footer.
std::string tfrecord_frame(const std::string& data);

// The encoded Event protos this writer emits (exposed for tests).
std::string encode_file_version_event(double wall_time, const std::string& file_version);
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

class TensorBoardWriter {
 public:
  // Creates dir (and parents) and the file, events.out.tfevents.<unix seconds>.<hostname>.<pid>;
  // its first record, Event{wall_time, file_version:"brain.Event:2"}, is written by the first
  // flush(). Throws IoError naming the path and the reason on failure.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();  // writes what is pending, as flush() does, without throwing
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Event{wall_time, step, summary{value{tag, simple_value(float)}}}, kept until flush().
  void add_scalar(const std::string& tag, int64_t step, double value);
  // Writes the records added since the last flush in one append: all of them reach the file or
  // none does, so the file always ends with a whole record. Throws IoError naming the path and the
  // reason; the records are then dropped.
  void flush();
  const std::string& path() const { return path_; }
  // Removes the file where nothing reached it (its first flush failed), so that no empty event
  // file is left behind.
  void remove_if_empty();

 private:
  std::string path_;
  std::unique_ptr<AppendFile> file_;
  std::string pending_;  // framed records not yet written
};

}  // namespace mgt
