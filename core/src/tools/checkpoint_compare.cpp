#include "tools/checkpoint_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <ostream>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

namespace {

// The tensors of one kind in both checkpoints, matched by name; each line prefixed by `label`
// (empty for the parameters, whose lines stay as they always were).
class Comparison {
 public:
  Comparison(std::string a, std::string b, double rtol, std::ostream& out)
      : a_(std::move(a)), b_(std::move(b)), rtol_(rtol), out_(out) {}

  void tensors(const std::string& label, const std::vector<StoredTensor>& left,
               const std::vector<StoredTensor>& right) {
    std::map<std::string, const StoredTensor*> by_name;
    for (const auto& t : right) by_name[t.name] = &t;
    if (left.size() != right.size()) {
      out_ << (label.empty() ? "parameter" : label) << " count differs: " << left.size() << " vs " << right.size()
           << "\n";
      match_ = false;
    }
    for (const auto& l : left) {
      const std::string name = label.empty() ? l.name : label + "/" + l.name;
      const auto it = by_name.find(l.name);
      if (it == by_name.end()) {
        out_ << name << ": missing in " << b_ << "\n";
        match_ = false;
        continue;
      }
      const StoredTensor& r = *it->second;
      if (l.shape != r.shape) {
        out_ << name << ": shape " << shape_string(l.shape) << " vs " << shape_string(r.shape) << "\n";
        match_ = false;
        continue;
      }
      const bool bitwise = std::memcmp(l.values.data(), r.values.data(), l.values.size() * sizeof(float)) == 0;
      double max_diff = 0, max_abs = 0;
      for (size_t i = 0; i < l.values.size(); ++i) {
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(l.values[i] - r.values[i])));
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(l.values[i])));
      }
      const double relative = max_abs > 0 ? max_diff / max_abs : max_diff;
      const bool match = rtol_ == 0 ? bitwise : relative <= rtol_;
      match_ = match_ && match;
      char line[512];
      std::snprintf(line, sizeof(line), "%-24s %s  max|a-b| %.3e  relative %.3e\n", name.c_str(),
                    bitwise ? "identical" : (match ? "within   " : "DIFFERENT"), max_diff, relative);
      out_ << line;
    }
    for (const auto& r : right)
      if (std::none_of(left.begin(), left.end(), [&](const StoredTensor& l) { return l.name == r.name; })) {
        out_ << (label.empty() ? r.name : label + "/" + r.name) << ": missing in " << a_ << "\n";
        match_ = false;
      }
  }

  template <typename T>
  void value(const std::string& name, const T& left, const T& right, const std::string& left_text,
             const std::string& right_text) {
    const bool same = left == right;
    match_ = match_ && same;
    out_ << name << " " << (same ? "identical" : "DIFFERENT") << "  " << left_text << " vs " << right_text << "\n";
  }

  void differs(const std::string& line) {
    out_ << line << "\n";
    match_ = false;
  }

  bool match() const { return match_; }

 private:
  std::string a_, b_;
  double rtol_;
  std::ostream& out_;
  bool match_ = true;
};

std::string counters_text(const std::vector<int64_t>& values) {
  std::string text;
  for (int64_t v : values) text += (text.empty() ? "" : ",") + std::to_string(v);
  return "[" + text + "]";
}

std::vector<StoredTensor> sync_arrays(const SyncState& sync) {
  std::vector<StoredTensor> out;
  for (const auto& [name, values] : sync.arrays) out.push_back({name, {static_cast<int64_t>(values.size())}, values});
  return out;
}

}  // namespace

bool compare_checkpoints(const std::string& a, const std::string& b, double rtol, bool params_only, std::ostream& out) {
  // A negative or NaN tolerance no difference can be within: every tensor would be listed, then
  // the verdict would contradict the lines. Refused before anything is read.
  if (!(rtol >= 0) || !std::isfinite(rtol)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", rtol);
    throw ConfigError(std::string("compare: --rtol: expected a finite number >= 0 (0: bit for bit), got ") + got);
  }
  const CheckpointContents left = read_checkpoint_contents(a);
  const CheckpointContents right = read_checkpoint_contents(b);
  Comparison c(a, b, rtol, out);
  c.tensors("", left.params, right.params);
  if (!params_only) {
    c.tensors("buffers", left.buffers, right.buffers);
    c.value("optimizer_steps", left.optimizer_steps, right.optimizer_steps, std::to_string(left.optimizer_steps),
            std::to_string(right.optimizer_steps));
    std::vector<std::string> names;
    for (const auto& entry : left.optimizer) names.push_back(entry.first);
    for (const auto& entry : right.optimizer)
      if (!left.optimizer.contains(entry.first)) names.push_back(entry.first);
    for (const auto& name : names) {
      const auto l = left.optimizer.find(name), r = right.optimizer.find(name);
      if (l == left.optimizer.end() || r == right.optimizer.end()) {
        c.differs("optimizer/" + name + ": missing in " + (l == left.optimizer.end() ? a : b));
        continue;
      }
      c.tensors("optimizer/" + name, l->second, r->second);
    }
    const SyncState& ls = left.meta.sync;
    const SyncState& rs = right.meta.sync;
    if (!ls.strategy.empty() || !rs.strategy.empty()) {
      c.value("sync/strategy", ls.strategy, rs.strategy, "'" + ls.strategy + "'", "'" + rs.strategy + "'");
      std::map<std::string, std::vector<int64_t>> counters = ls.counters;
      counters.insert(rs.counters.begin(), rs.counters.end());
      for (const auto& entry : counters) {
        const auto l = ls.counters.find(entry.first), r = rs.counters.find(entry.first);
        const std::vector<int64_t> lv = l == ls.counters.end() ? std::vector<int64_t>{} : l->second;
        const std::vector<int64_t> rv = r == rs.counters.end() ? std::vector<int64_t>{} : r->second;
        c.value("sync/" + entry.first, lv, rv, l == ls.counters.end() ? "missing" : counters_text(lv),
                r == rs.counters.end() ? "missing" : counters_text(rv));
      }
      c.tensors("sync", sync_arrays(ls), sync_arrays(rs));
    }
  }
  out << (c.match() ? "MATCH" : "MISMATCH") << " ("
      << (rtol == 0 ? std::string("bitwise") : "rtol " + std::to_string(rtol))
      << (params_only ? ", parameters only" : ", parameters, buffers, optimizer and sync state") << ")\n";
  return c.match();
}

}  // namespace mgt
