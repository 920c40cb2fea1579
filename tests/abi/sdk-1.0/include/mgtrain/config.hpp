#pragma once
// Run configuration: `section.key = value` pairs from an INI file and `--section.key=value`
// overrides, validated against the key tables of the core and of every loaded plugin. The same
// tables generate the documentation of every key, so code and docs cannot drift.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mgtrain/error.hpp"
#include "mgtrain/export.hpp"

namespace mgt {

enum class KeyType {
  string,
  path,
  integer,
  positive_integer,
  non_negative_integer,
  real,
  positive_real,
  non_negative_real,
  boolean,
  integer_list,
  choice
};

// One documented config key. `key` is the full `section.key` name.
struct ConfigKey {
  const char* key;
  KeyType type;
  const char* default_value;  // nullptr: required
  const char* help;
  const char* choices = nullptr;  // KeyType::choice: the allowed values, "abort|skip"
};

MGT_API const char* key_type_name(KeyType type);

// Where a value came from, for error messages ("run.ini", "command line", "default").
struct ConfigValue {
  std::string value;
  std::string source;
};

class MGT_API Config {
 public:
  // Parses an INI file: `[section]` headers, `key = value`, `#` or `;` comments; a line ending in
  // a backslash goes on with the next.
  static Config from_ini_file(const std::string& path);
  static Config from_string(const std::string& ini_text, const std::string& source_name);

  void set(const std::string& key, const std::string& value, const std::string& source);
  bool has(const std::string& key) const;
  // Removes the key if set: a key of a plugin that the config does not choose.
  void erase(const std::string& key) { values_.erase(key); }
  const std::map<std::string, ConfigValue>& values() const { return values_; }

  // Fills defaults from the table, then checks every value against its key's type. Throws
  // ConfigError for a key that no table knows, a required key that is missing or a value of the
  // wrong type, naming the key, its source, and expected versus actual.
  void validate(const std::vector<ConfigKey>& known_keys);

  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_real(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;

  // The resolved configuration as INI text, sections sorted: printed at start, stored in every
  // checkpoint and parsed back by `mgtrain eval`.
  std::string to_ini() const;

 private:
  const ConfigValue& lookup(const std::string& key) const;
  std::map<std::string, ConfigValue> values_;
  // After validate() every key the core and the chosen plugins declare is set, so a key missing
  // then is one that whoever reads it never declared.
  bool validated_ = false;
};

// The largest width, channel count or input size a model key may ask for: beyond any real layer,
// and small enough that checking sizes against it keeps their products from wrapping.
inline constexpr int64_t kMaxModelSize = int64_t{1} << 24;

// A plugin's view of its own section: `section("model").get_int("hidden")` reads model.hidden.
class MGT_API ConfigSection {
 public:
  ConfigSection(const Config& config, std::string section) : config_(&config), section_(std::move(section)) {}
  const std::string& name() const { return section_; }
  std::string get_string(const std::string& key) const { return config_->get_string(full(key)); }
  int64_t get_int(const std::string& key) const { return config_->get_int(full(key)); }
  double get_real(const std::string& key) const { return config_->get_real(full(key)); }
  bool get_bool(const std::string& key) const { return config_->get_bool(full(key)); }
  std::vector<int64_t> get_int_list(const std::string& key) const { return config_->get_int_list(full(key)); }
  bool has(const std::string& key) const { return config_->has(full(key)); }
  const Config& root() const { return *config_; }

  // A size the model is built from (a width, a channel count): an integer from 1 to `limit`, checked
  // before anything is allocated from it. Throws ConfigError naming the key, value and limit.
  int64_t get_size(const std::string& key, int64_t limit) const {
    const int64_t value = get_int(key);
    if (value < 1 || value > limit) throw ConfigError(size_error(key, std::to_string(value), limit));
    return value;
  }
  std::vector<int64_t> get_size_list(const std::string& key, int64_t limit) const {
    const auto values = get_int_list(key);
    for (int64_t value : values)
      if (value < 1 || value > limit)
        throw ConfigError(size_error(key, std::to_string(value), limit) + " (in '" + get_string(key) + "')");
    return values;
  }

 private:
  std::string full(const std::string& key) const { return section_ + "." + key; }
  std::string size_error(const std::string& key, const std::string& value, int64_t limit) const {
    const auto it = config_->values().find(full(key));
    const std::string source = it == config_->values().end() ? "default" : it->second.source;
    return "config key '" + full(key) + "' (" + source + "): expected a size from 1 to " + std::to_string(limit) +
           ", got " + value;
  }
  const Config* config_;
  std::string section_;
};

}  // namespace mgt
