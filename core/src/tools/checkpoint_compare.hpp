#pragma once
// Compares two checkpoints: bit for bit, or within a relative tolerance.
#include <iosfwd>
#include <string>

namespace mgt {

// Reads both checkpoints whole, verified as a resume verifies them (checksums, finite values,
// attributes; a damaged one throws naming it), and prints one line per tensor (max |a-b|, and
// |a-b| relative to the tensor's max |a|) and a verdict. Compared: the parameters and, unless
// `params_only`, the model's buffers, the optimizer's state and step count, and the sync
// strategy's state. Returns true when everything compared matches: bitwise for rtol == 0,
// otherwise max|a-b| <= rtol * max|a| for each tensor; counters exactly. Differing names or
// shapes never match. An rtol below 0 or not finite throws ConfigError before anything is read.
bool compare_checkpoints(const std::string& a, const std::string& b, double rtol, bool params_only, std::ostream& out);

}  // namespace mgt
