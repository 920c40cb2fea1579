#pragma once
// CRC-32 as zlib computes it (the gzip polynomial), the checksum of the data files' rows and of the
// checkpoints' arrays. libdeflate's, which folds with carry-less multiplies where the CPU has them,
// is several times as fast as zlib's tables, and every row is checked each time a batch is read
// (benchmarks/row_crc32.sh; docs/benchmarks.md, "The data reader"). The same values as zlib
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
