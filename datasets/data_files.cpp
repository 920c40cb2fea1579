#include "datasets/data_files.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>

#include "mgtrain/error.hpp"

namespace mgt::data {

namespace {

bool has_pattern(const std::string& entry) { return entry.find_first_of("*?[") != std::string::npos; }

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

std::vector<std::string> glob_matches(const std::string& spec, const std::string& pattern) {
  glob_t found{};
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &found);
  std::vector<std::string> paths;
  for (size_t i = 0; rc == 0 && i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
  globfree(&found);
  if (rc == GLOB_NOSPACE)
    throw ConfigError("data files '" + printable(spec) + "': expanding '" + printable(pattern) + "' ran out of memory");
  if (paths.empty())
    throw ConfigError("data files '" + printable(spec) + "': the pattern '" + printable(pattern) +
                      "' matches no file, expected at least one");
  // Byte order, as `ls` in the C locale and Python's sorted(glob(...)): shard-00010 after shard-00009.
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

std::vector<std::string> expand_data_files(const std::string& spec) {
  struct stat whole {};
  if (spec.empty() || ::stat(spec.c_str(), &whole) == 0) return {spec};
  std::vector<std::string> files;
  std::vector<std::string> named_by;  // the entry that gave each file
  size_t from = 0;
  for (;;) {
    const size_t comma = spec.find(',', from);
    const std::string entry = trimmed(spec.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (entry.empty())
      throw ConfigError("data files '" + printable(spec) +
                        "': an entry is empty, expected a comma-separated list of files or glob patterns");
    const std::vector<std::string> paths = has_pattern(entry) ? glob_matches(spec, entry) : std::vector{entry};
    for (const std::string& path : paths) {
      files.push_back(path);
      named_by.push_back(entry);
    }
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  // The same file twice would be trained on twice an epoch: said rather than done.
  std::vector<struct stat> seen(files.size());
  std::vector<bool> stated(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    stated[i] = ::stat(files[i].c_str(), &seen[i]) == 0;
    for (size_t j = 0; j < i; ++j) {
      const bool same = stated[i] && stated[j] ? seen[i].st_dev == seen[j].st_dev && seen[i].st_ino == seen[j].st_ino
                                               : files[i] == files[j];
      if (!same) continue;
      const std::string how =
          files[i] == files[j] ? "" : " (as '" + printable(files[j]) + "' and '" + printable(files[i]) + "')";
      const std::string entries = named_by[i] == named_by[j]
                                      ? "by '" + printable(named_by[i]) + "'"
                                      : "by '" + printable(named_by[j]) + "' and '" + printable(named_by[i]) + "'";
      throw ConfigError("data files '" + printable(spec) + "' name file '" + printable(files[j]) + "' twice" + how +
                        ", " + entries + ": expected each file once");
    }
  }
  return files;
}

ShardFacts shard_facts(const TokenFileInfo& file) {
  return {file.path,
          {{"vocab_size", std::to_string(file.vocab_size)},
           {"tokenizer", file.tokenizer + (file.tokenizer_sha256.empty() ? "" : " " + file.tokenizer_sha256)},
           {"bytes per token", std::to_string(file.token_bytes)}}};
}

ShardFacts shard_facts(const DatasetInfo& file) {
  std::string names;
  for (const std::string& name : file.class_names) names += (names.empty() ? "" : ", ") + name;
  return {file.path,
          {{"sample shape", shape_string(file.sample_shape)},
           {"sample type", file.x_type},
           {"number of classes", std::to_string(file.num_classes)},
           {"class names", "[" + names + "]"}}};
}

void check_shards_agree(const std::string& spec, const std::vector<ShardFacts>& shards) {
  for (size_t s = 1; s < shards.size(); ++s) {
    const ShardFacts &first = shards.front(), &other = shards[s];
    for (size_t f = 0; f < first.facts.size() && f < other.facts.size(); ++f) {
      const auto& [what, value] = first.facts[f];
      if (value == other.facts[f].second) continue;
      throw DataError("data files '" + printable(first.path) + "' and '" + printable(other.path) + "' (shards of '" +
                      printable(spec) + "') differ: " + what + " " + printable(value) + " vs " +
                      printable(other.facts[f].second) + "; expected the shards of one data set to agree");
    }
  }
}

void file_spans(const std::vector<int64_t>& starts, int64_t offset, int64_t count, std::vector<FileSpan>& spans) {
  MGT_CHECK(starts.size() >= 2 && offset >= 0 && count >= 0 && offset + count <= starts.back(), Error,
            "range " + std::to_string(offset) + " + " + std::to_string(count) + " outside the data set's " +
                std::to_string(starts.empty() ? 0 : starts.back()));
  spans.clear();
  // The last file starting at or before `offset` (files are never empty).
  size_t file = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end() - 1, offset) - starts.begin()) - 1;
  while (count > 0) {
    const int64_t within = offset - starts[file];
    const int64_t n = std::min(count, starts[file + 1] - offset);
    spans.push_back({file, within, n});
    offset += n;
    count -= n;
    ++file;
  }
}

DatasetInfo sample_set_info(const std::string& spec, const std::vector<DatasetInfo>& shards) {
  std::vector<ShardFacts> facts;
  for (const DatasetInfo& shard : shards) facts.push_back(shard_facts(shard));
  check_shards_agree(spec, facts);
  DatasetInfo info = shards.front();
  if (shards.size() == 1) return info;
  info.path = spec;
  for (size_t s = 1; s < shards.size(); ++s) {
    info.num_samples += shards[s].num_samples;
    info.row_checksums = info.row_checksums && shards[s].row_checksums;
  }
  return info;
}

DatasetInfo open_sample_set_info(const std::string& spec, const std::string& x_name, const std::string& y_name) {
  std::vector<DatasetInfo> shards;
  for (const std::string& path : expand_data_files(spec)) shards.push_back(open_dataset_info(path, x_name, y_name));
  return sample_set_info(spec, shards);
}

std::vector<FileSpan> file_spans(const std::vector<int64_t>& starts, int64_t offset, int64_t count) {
  std::vector<FileSpan> spans;
  file_spans(starts, offset, count, spans);
  return spans;
}

}  // namespace mgt::data
