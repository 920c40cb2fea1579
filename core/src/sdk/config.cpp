#include "mgtrain/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "datasets/regular_file.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

namespace {

// Far beyond any real config; bounds what a file that never ends (/proc, a growing log) costs.
constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  // The whole text, not up to a NUL inside it ("1\0junk" is not 1).
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = v;
  return true;
}

// A whole number too large for 64 bits (a seed of 2^64 - 1): the message then says the range.
bool beyond_int64(const std::string& text) {
  const size_t digits_from = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (text.size() <= digits_from) return false;
  for (size_t i = digits_from; i < text.size(); ++i)
    if (text[i] < '0' || text[i] > '9') return false;
  int64_t unused;
  return !parse_int(text, &unused);
}

bool parse_real(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_bool(const std::string& text, bool* out) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "true" || t == "1" || t == "yes" || t == "on") {
    *out = true;
    return true;
  }
  if (t == "false" || t == "0" || t == "no" || t == "off") {
    *out = false;
    return true;
  }
  return false;
}

bool parse_int_list(const std::string& text, std::vector<int64_t>* out) {
  out->clear();
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t v;
    if (!parse_int(trim(item), &v)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

// Real keys are read as double but used as float (hyper-parameters in the update rule, dropout
// rates): a value must stay finite, and a positive one positive, once rounded to float.
bool fits_float(double value) { return std::fabs(value) <= static_cast<double>(FLT_MAX); }
bool positive_as_float(double value) { return static_cast<float>(value) > 0.0f; }

std::string float_range(const char* what) {
  char text[96];
  std::snprintf(text, sizeof text, "%s that a 32-bit float holds (magnitude at most %.6g)", what,
                static_cast<double>(FLT_MAX));
  return text;
}

// Why `value` does not fit `key`'s type, or "" when it does.
std::string type_violation(const ConfigKey& key, const std::string& value) {
  const KeyType type = key.type;
  int64_t i;
  double r;
  bool b;
  std::vector<int64_t> list;
  switch (type) {
    case KeyType::string:
    case KeyType::path:
      return "";
    case KeyType::integer:
      if (beyond_int64(value)) return "an integer from -9223372036854775808 to 9223372036854775807";
      return parse_int(value, &i) ? "" : "an integer";
    case KeyType::positive_integer:
      if (beyond_int64(value)) return "an integer from 1 to 9223372036854775807";
      return parse_int(value, &i) && i > 0 ? "" : "a positive integer";
    case KeyType::non_negative_integer:
      if (beyond_int64(value)) return "an integer from 0 to 9223372036854775807";
      return parse_int(value, &i) && i >= 0 ? "" : "an integer >= 0";
    case KeyType::real:
      if (!parse_real(value, &r)) return "a number";
      return fits_float(r) ? "" : float_range("a number");
    case KeyType::positive_real:
      if (!parse_real(value, &r) || r <= 0) return "a positive number";
      if (!fits_float(r)) return float_range("a positive number");
      return positive_as_float(r) ? "" : "a positive number that stays positive as a 32-bit float (at least 1.4e-45)";
    case KeyType::non_negative_real:
      if (!parse_real(value, &r) || r < 0) return "a number >= 0";
      return fits_float(r) ? "" : float_range("a number >= 0");
    case KeyType::boolean:
      return parse_bool(value, &b) ? "" : "true or false";
    case KeyType::integer_list:
      return parse_int_list(value, &list) ? "" : "a comma-separated list of integers";
    case KeyType::choice: {
      const std::string choices = key.choices ? key.choices : "";
      std::stringstream ss(choices);
      std::string item, listed;
      while (std::getline(ss, item, '|')) {
        if (item == value) return "";
        listed += (listed.empty() ? "" : " or ") + item;
      }
      return listed;
    }
  }
  return "";
}

}  // namespace

const char* key_type_name(KeyType type) {
  switch (type) {
    case KeyType::string:
      return "string";
    case KeyType::path:
      return "path";
    case KeyType::integer:
      return "integer";
    case KeyType::positive_integer:
      return "integer > 0";
    case KeyType::non_negative_integer:
      return "integer >= 0";
    case KeyType::real:
      return "number";
    case KeyType::positive_real:
      return "number > 0";
    case KeyType::non_negative_real:
      return "number >= 0";
    case KeyType::boolean:
      return "boolean";
    case KeyType::integer_list:
      return "integer list";
    case KeyType::choice:
      return "one of";
  }
  return "?";
}

Config Config::from_ini_file(const std::string& path) {
  // Opened without blocking, so a FIFO is refused rather than waited on.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw ConfigError("config file '" + path + "' cannot be opened: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0)
    throw ConfigError("config file '" + path + "' cannot be read: " + std::strerror(errno) + " (expected an INI file)");
  // A directory opens as a stream that reads nothing, which would look like an empty config.
  if (S_ISDIR(info.st_mode))
    throw ConfigError("config file '" + path + "' cannot be read: " + std::strerror(EISDIR) +
                      " (expected an INI file)");
  if (!S_ISREG(info.st_mode))
    throw ConfigError("config file '" + path + "' cannot be read: it is " + data::non_regular_kind(info.st_mode) +
                      ", not a regular file (expected an INI file)");
  std::string text;
  char chunk[65536];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw ConfigError("config file '" + path + "' cannot be read: " + std::strerror(errno));
    if (got == 0) break;
    if (text.size() + static_cast<size_t>(got) > kMaxConfigFileBytes)
      throw ConfigError("config file '" + path + "' is larger than " + std::to_string(kMaxConfigFileBytes >> 20) +
                        " MiB, the most a config file may hold (expected an INI file)");
    text.append(chunk, static_cast<size_t>(got));
  }
  return from_string(text, path);
}

Config Config::from_string(const std::string& ini_text, const std::string& source_name) {
  Config config;
  std::stringstream in(ini_text);
  std::string line, section;
  int line_no = 0;
  // Where each section header and key was first seen: a second one is refused, since the last
  // silently winning hides which value a run used.
  std::map<std::string, std::string> section_seen, key_seen;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = source_name + ":" + std::to_string(line_no);
    std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    // A line ending in a backslash goes on with the next one (a long model.layers list), but never
    // into a section header: that would swallow the header, and its keys would land in the section
    // before it, reported as keys set twice at lines that do not say why.
    for (std::string next; !t.empty() && t.back() == '\\' && std::getline(in, next); ++line_no) {
      const std::string continued = trim(next);
      if (!continued.empty() && continued.front() == '[')
        throw ConfigError(source_name + ":" + std::to_string(line_no) +
                          ": the trailing backslash continues this line into the section header '" + continued +
                          "' on line " + std::to_string(line_no + 1) +
                          "; remove the backslash (a section header cannot continue a value)");
      t = trim(t.substr(0, t.size() - 1)) + " " + continued;
    }
    if (t.front() == '[') {
      if (t.back() != ']' || t.size() < 3)
        throw ConfigError(where + ": expected a section header like [model], got '" + t + "'");
      section = trim(t.substr(1, t.size() - 2));
      const auto [first, inserted] = section_seen.emplace(section, where);
      if (!inserted)
        throw ConfigError(where + ": section [" + section + "] appears twice (first at " + first->second +
                          "); keep one [" + section + "] with all its keys");
      continue;
    }
    const auto eq = t.find('=');
    if (eq == std::string::npos) throw ConfigError(where + ": expected 'key = value', got '" + t + "'");
    std::string key = trim(t.substr(0, eq));
    std::string value = trim(t.substr(eq + 1));
    // Trailing comments after a value: "lr = 0.1  # comment".
    for (const char* marker : {" #", " ;", "\t#", "\t;"}) {
      const auto c = value.find(marker);
      if (c != std::string::npos) value = trim(value.substr(0, c));
    }
    if (key.empty()) throw ConfigError(where + ": empty key");
    if (key.find('.') == std::string::npos) {
      if (section.empty()) throw ConfigError(where + ": key '" + key + "' is outside any [section]");
      key = section + "." + key;
    }
    const auto [first, inserted] = key_seen.emplace(key, where);
    if (!inserted)
      throw ConfigError(where + ": config key '" + key + "' is set twice (first at " + first->second +
                        "); keep one of the two lines");
    config.set(key, value, where);
  }
  return config;
}

void Config::set(const std::string& key, const std::string& value, const std::string& source) {
  values_[key] = ConfigValue{value, source};
}

bool Config::has(const std::string& key) const { return values_.count(key) != 0; }

void Config::validate(const std::vector<ConfigKey>& known_keys) {
  std::map<std::string, const ConfigKey*> table;
  for (const auto& k : known_keys) table[k.key] = &k;
  for (const auto& [key, value] : values_) {
    if (table.count(key)) continue;
    // Suggest the known keys of the same section, which is what a typo usually needs.
    const std::string section = key.substr(0, key.find('.'));
    std::string known;
    for (const auto& [name, _] : table)
      if (name.rfind(section + ".", 0) == 0) known += (known.empty() ? "" : ", ") + name;
    throw ConfigError("unknown config key '" + key + "' (" + value.source + "); known keys in [" + section +
                      "]: " + (known.empty() ? "none" : known));
  }
  // Every checkpoint stores the config as INI, which `mgtrain eval` reads back: a value the INI
  // reader would cut short (a line break, a comment marker after a blank, outer blanks) is refused
  // here rather than changed silently there. Only command-line overrides can hold one.
  for (const auto& [key, value] : values_) {
    const std::string& v = value.value;
    std::string why;
    if (v.find_first_of("\n\r") != std::string::npos) why = "a line break";
    for (const char* marker : {" #", " ;", "\t#", "\t;"})
      if (why.empty() && v.find(marker) != std::string::npos)
        why = std::string("'") + marker + "', which INI reads as a comment";
    if (why.empty() && !v.empty() &&
        (std::isspace(static_cast<unsigned char>(v.front())) || std::isspace(static_cast<unsigned char>(v.back()))))
      why = "blanks at either end";
    if (!why.empty())
      throw ConfigError("config key '" + key + "' (" + value.source + "): the value holds " + why +
                        ", which the INI config stored in checkpoints cannot keep");
  }
  for (const auto& k : known_keys) {
    if (!has(k.key)) {
      if (!k.default_value) throw ConfigError("config key '" + std::string(k.key) + "' is required (" + k.help + ")");
      set(k.key, k.default_value, "default");
    }
    const ConfigValue& v = values_.at(k.key);
    const std::string expected = type_violation(k, v.value);
    if (!expected.empty())
      throw ConfigError("config key '" + std::string(k.key) + "' (" + v.source + "): expected " + expected + ", got '" +
                        v.value + "'");
  }
  validated_ = true;
}

const ConfigValue& Config::lookup(const std::string& key) const {
  const auto it = values_.find(key);
  if (it != values_.end()) return it->second;
  if (!validated_) throw ConfigError("config key '" + key + "' is not set");
  // Declared keys all have values by now: this one is read by a plugin (or the core) that does not
  // declare it, and a value given for it was dropped as no chosen plugin's.
  const std::string section = key.substr(0, key.find('.'));
  const auto plugin = values_.find(section + ".name");
  const std::string reader =
      plugin != values_.end() ? section + " plugin '" + plugin->second.value + "'" : "a plugin of [" + section + "]";
  throw ConfigError("config key '" + key + "' is read by " + reader +
                    ", which does not declare it: a plugin must declare every key it reads in its ConfigKey "
                    "table, with a default or as required (docs/plugins.md, \"Config keys\"); until it does, a "
                    "value given for the key is dropped as no chosen plugin's");
}

std::string Config::get_string(const std::string& key) const { return lookup(key).value; }

int64_t Config::get_int(const std::string& key) const {
  const auto& v = lookup(key);
  int64_t out;
  if (!parse_int(v.value, &out))
    throw ConfigError("config key '" + key + "' (" + v.source + "): expected an integer, got '" + v.value + "'");
  return out;
}

double Config::get_real(const std::string& key) const {
  const auto& v = lookup(key);
  double out;
  if (!parse_real(v.value, &out))
    throw ConfigError("config key '" + key + "' (" + v.source + "): expected a number, got '" + v.value + "'");
  return out;
}

bool Config::get_bool(const std::string& key) const {
  const auto& v = lookup(key);
  bool out;
  if (!parse_bool(v.value, &out))
    throw ConfigError("config key '" + key + "' (" + v.source + "): expected true or false, got '" + v.value + "'");
  return out;
}

std::vector<int64_t> Config::get_int_list(const std::string& key) const {
  const auto& v = lookup(key);
  std::vector<int64_t> out;
  if (!parse_int_list(v.value, &out))
    throw ConfigError("config key '" + key + "' (" + v.source +
                      "): expected a comma-separated list of integers, got '" + v.value + "'");
  return out;
}

std::string Config::to_ini() const {
  std::string out, section;
  for (const auto& [key, value] : values_) {  // std::map: sorted, so sections are contiguous
    const auto dot = key.find('.');
    const std::string s = key.substr(0, dot);
    if (s != section) {
      out += (out.empty() ? "[" : "\n[") + s + "]\n";
      section = s;
    }
    out += key.substr(dot + 1) + " = " + value.value + "\n";
  }
  return out;
}

}  // namespace mgt
