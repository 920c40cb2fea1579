#pragma once
// SHA-256 (FIPS 180-4), for the parameter hashes `mgtrain verify` prints: a digest anyone can
// recompute with sha256sum from the checkpoint's raw datasets.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mgt {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::string hex_digest();  // finishes the hash

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

}  // namespace mgt
