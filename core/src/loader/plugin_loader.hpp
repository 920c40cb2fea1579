#pragma once
// Finds, loads and checks plugins (Boost.DLL). Search order: --plugin-path, MGTRAIN_PLUGIN_PATH,
// the install's lib/mgtrain/plugins, the build tree (only for the build tree's own libmgtrain).
// Libraries stay loaded for the process's life.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/config.hpp"
#include "mgtrain/layer_plugin.hpp"
#include "mgtrain/model.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/plugin.hpp"
#include "mgtrain/schedule.hpp"
#include "mgtrain/sync.hpp"

namespace mgt {

// Whether a plugin that recorded SDK version `abi_version` (MGTRAIN_PLUGIN_ABI_VERSION at its
// build) runs in this core: the same major version and a minor no newer than ours. "" when it
// does, else the reason in words ("was built against SDK 2.0, ...").
std::string sdk_version_refusal(uint32_t abi_version);
// "1.0" for MGTRAIN_PLUGIN_ABI_VERSION's value of SDK 1.0; a value from before 1.0 reads "0.19".
std::string sdk_version_text(uint32_t abi_version);

struct PluginCandidate {
  std::string path;
  std::string kind, name, version, description;
  bool usable = false;
  std::string refusal;                 // why it was refused, when !usable
  bool shadowed = false;               // refused only because an earlier directory has its file name
  std::vector<ConfigKey> config_keys;  // when usable; the library stays loaded, so they stay valid
};

class PluginRegistry {
 public:
  explicit PluginRegistry(std::vector<std::string> cli_paths = {});

  std::vector<std::string> search_dirs() const { return dirs_; }
  // Loads libmgtrain-<kind>-<name>.so from the first directory that has it and checks it.
  const PluginDescriptor& load(const std::string& kind, const std::string& name);
  // Every candidate file in the search path, loaded and checked, for `mgtrain plugins`.
  std::vector<PluginCandidate> scan();

  // Config keys the loaded plugin declares.
  std::vector<ConfigKey> config_keys(const std::string& kind, const std::string& name);

  // Plugins must already be loaded; config must be validated (defaults filled). While the model is
  // built, a layer kind it does not know is looked up as a layer plugin (find_layer).
  std::unique_ptr<Model> create_model(const std::string& name, const Config& config);
  std::unique_ptr<Optimizer> create_optimizer(const std::string& name, const Config& config);
  std::unique_ptr<SyncStrategy> create_sync(const std::string& name, const Config& config);
  // A schedule plugin (train.lr_schedule names one that is not built in), from [schedule]; not set up.
  std::unique_ptr<LearningRateSchedule> create_schedule(const std::string& name, const Config& config);

  // The layer plugin libmgtrain-layer-<kind>.so, loaded and checked, or null when the search path
  // has no file of that name.
  std::unique_ptr<LayerFactory> find_layer(const std::string& kind);

  // "kind:name@version;..." of every loaded plugin, in load order; compared across ranks and
  // stored in checkpoints.
  std::string loaded_summary() const;
  // "kind:name=<absolute path>;..." of every loaded plugin's library, in load order: stored in
  // checkpoints so that `mgtrain eval` finds a plugin the run took from a --plugin-path.
  std::string loaded_paths() const;

  // Libraries a checkpoint's run loaded (a loaded_paths() text), for diagnostics only: a plugin in
  // no directory of the search path is refused with where `origin` (whose they are) loaded it, never
  // loaded from there. A checkpoint names plugins; it never names files to load.
  void add_recorded_paths(const std::string& paths, const std::string& origin);

 private:
  struct Loaded;
  void* create(const std::string& kind, const std::string& name, const Config& config);
  const PluginDescriptor& load_from(const std::string& path, const std::string& kind, const std::string& name);
  // The library of plugin kind:name in the search path; "" if none.
  std::string locate(const std::string& kind, const std::string& name);
  std::vector<std::string> dirs_;
  std::vector<std::shared_ptr<Loaded>> loaded_;
  std::vector<std::pair<std::string, std::string>> recorded_;  // "kind:name", library path
  std::string recorded_origin_;
};

}  // namespace mgt
