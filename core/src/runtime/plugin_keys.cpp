#include "runtime/plugin_keys.hpp"

#include <map>
#include <set>
#include <vector>

#include "mgtrain/error.hpp"
#include "runtime/core_keys.hpp"
#include "runtime/lr_schedule.hpp"

namespace mgt {

std::string drop_keys_of_unchosen_plugins(PluginRegistry& registry, Config& config) {
  std::set<std::string> core;
  std::map<std::string, std::string> defaults;
  for (const auto& k : core_config_keys()) {
    core.insert(k.key);
    if (k.default_value) defaults[k.key] = k.default_value;
  }
  // Per kind, the chosen plugin and the keys nobody chosen declares.
  std::map<std::string, std::string> chosen;
  std::map<std::string, std::vector<std::string>> unknown;
  for (const std::string kind : {"model", "optimizer", "sync", "schedule"}) {
    // A schedule is chosen by train.lr_schedule, the other kinds by <kind>.name.
    const std::string name_key = kind == "schedule" ? "train.lr_schedule" : kind + ".name";
    const std::string name = config.has(name_key)       ? config.get_string(name_key)
                             : defaults.count(name_key) ? defaults[name_key]
                                                        : "";
    if (name.empty()) continue;
    std::set<std::string> known;  // a built-in schedule declares no keys
    if (kind != "schedule" || !is_builtin_schedule(name)) {
      try {
        for (const auto& k : registry.config_keys(kind, name)) known.insert(k.key);
      } catch (const PluginError&) {
        continue;
      }
    }
    for (const auto& [key, value] : config.values())
      if (key.rfind(kind + ".", 0) == 0 && !core.count(key) && !known.count(key)) unknown[kind].push_back(key);
    chosen[kind] = name;
  }
  if (unknown.empty()) return "";

  // Which other plugins of the kind declare each of them (a candidate file that cannot be used
  // declares nothing).
  std::map<std::string, std::set<std::string>> owners;  // key -> plugin names
  for (const auto& c : registry.scan()) {
    if (!c.usable || !chosen.count(c.kind) || c.name == chosen[c.kind]) continue;
    for (const auto& k : c.config_keys) owners[k.key].insert(c.name);
  }
  std::string note;
  for (const auto& [kind, keys] : unknown) {
    // Keys grouped by the plugins that declare them, in key order.
    std::map<std::string, std::vector<std::string>> by_owner;
    for (const auto& key : keys) {
      if (!owners.count(key)) continue;
      std::string plugins;
      for (const auto& name : owners[key]) plugins += (plugins.empty() ? "" : ", ") + name;
      by_owner[plugins].push_back(key);
      config.erase(key);
    }
    for (const auto& [plugins, dropped] : by_owner) {
      std::string list;
      for (const auto& key : dropped) list += (list.empty() ? "" : ", ") + key;
      note += std::string(note.empty() ? "" : "; ") + list + " (" + kind + " " + plugins + ", not the chosen " + kind +
              " " + chosen[kind] + ")";
    }
  }
  return note.empty() ? "" : "ignoring config keys of plugins not chosen: " + note;
}

}  // namespace mgt
