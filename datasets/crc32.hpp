#pragma once
// CRC-32 as zlib computes it (the gzip polynomial), the checksum of the data files' rows and of the
// checkpoints' arrays. libdeflate's, which folds with carry-less multiplies where the CPU has them:
// 4 to 7 times zlib's tables on a 784-byte row (0.06-0.08 against 0.30-0.41 us), where every row is checked
// each time a batch is read (benchmarks/row_crc32.sh measures both). The same values as zlib
// (RowChecksum.Crc32IsZlibs).
#include <libdeflate.h>

#include <cstddef>
#include <cstdint>

namespace mgt {

// `crc` continued over `bytes` bytes of `data`; 0 starts a checksum.
inline uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
  return libdeflate_crc32(crc, data, bytes);
}

}  // namespace mgt
