#include "tools/checkpoint_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <ostream>

#include "checkpoint/checkpoint.hpp"

namespace mgt {

bool compare_checkpoints(const std::string& a, const std::string& b, double rtol, std::ostream& out) {
  const auto left = read_checkpoint_group(a, "/params");
  const auto right = read_checkpoint_group(b, "/params");
  std::map<std::string, const StoredTensor*> by_name;
  for (const auto& t : right) by_name[t.name] = &t;
  bool all_match = left.size() == right.size();
  if (!all_match) out << "parameter count differs: " << left.size() << " vs " << right.size() << "\n";
  for (const auto& l : left) {
    const auto it = by_name.find(l.name);
    if (it == by_name.end()) {
      out << l.name << ": missing in " << b << "\n";
      all_match = false;
      continue;
    }
    const StoredTensor& r = *it->second;
    if (l.shape != r.shape) {
      out << l.name << ": shape " << shape_string(l.shape) << " vs " << shape_string(r.shape) << "\n";
      all_match = false;
      continue;
    }
    const bool bitwise = std::memcmp(l.values.data(), r.values.data(), l.values.size() * sizeof(float)) == 0;
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < l.values.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(l.values[i] - r.values[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(l.values[i])));
    }
    const double relative = max_abs > 0 ? max_diff / max_abs : max_diff;
    const bool match = rtol == 0 ? bitwise : relative <= rtol;
    all_match = all_match && match;
    char line[256];
    std::snprintf(line, sizeof(line), "%-24s %s  max|a-b| %.3e  relative %.3e\n", l.name.c_str(),
                  bitwise ? "identical" : (match ? "within   " : "DIFFERENT"), max_diff, relative);
    out << line;
  }
  out << (all_match ? "MATCH" : "MISMATCH") << " ("
      << (rtol == 0 ? std::string("bitwise") : "rtol " + std::to_string(rtol)) << ")\n";
  return all_match;
}

}  // namespace mgt
