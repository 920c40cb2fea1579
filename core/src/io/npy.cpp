#include "io/npy.hpp"

#include <cstdint>

namespace mgt {

std::string npy_float32(const float* values, const Shape& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";  // a tuple of one: (N,)
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // The magic (6), version (2) and length (2) bytes and the header end on a 64-byte boundary,
  // the header padded with spaces and ended by a newline.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(values), static_cast<size_t>(shape_numel(shape)) * sizeof(float));
  return out;
}

}  // namespace mgt
