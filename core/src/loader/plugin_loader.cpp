#include "loader/plugin_loader.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "mgtrain/error.hpp"

namespace fs = std::filesystem;

namespace mgt {

std::string sdk_version_text(uint32_t abi_version) {
  // Before SDK 1.0 the version was one counter (the last 19): major 0, that counter as the minor.
  return std::to_string(abi_version >> 16) + "." + std::to_string(abi_version & 0xffffu);
}

std::string sdk_version_refusal(uint32_t abi_version) {
  const uint32_t major = abi_version >> 16, minor = abi_version & 0xffffu;
  const std::string ours = sdk_version_text(MGTRAIN_PLUGIN_ABI_VERSION);
  const std::string range = std::to_string(MGTRAIN_SDK_VERSION_MAJOR) + ".0 to " + ours;
  if (major == 0)
    return "was built for plugin ABI version " + std::to_string(abi_version) +
           ", from before SDK 1.0; this mgtrain loads plugins built against SDK " + range +
           ": rebuild it against this mgtrain's SDK";
  if (major != MGTRAIN_SDK_VERSION_MAJOR)
    return "was built against SDK " + sdk_version_text(abi_version) +
           "; this mgtrain loads plugins built against SDK " + range + ": rebuild it against this mgtrain's SDK";
  if (minor > MGTRAIN_SDK_VERSION_MINOR)
    return "was built against SDK " + sdk_version_text(abi_version) + ", newer than this mgtrain's SDK " + ours +
           ": run it with an mgtrain of SDK " + sdk_version_text(abi_version) +
           " or later, or rebuild it against this mgtrain's SDK";
  return "";
}

struct PluginRegistry::Loaded {
  std::string path;
  boost::dll::shared_library library;
  const PluginDescriptor* descriptor = nullptr;
};

namespace {

// Plugins are never unloaded: objects, exceptions and vtables from a plugin may outlive the
// registry that loaded it (an exception thrown by a plugin is printed after the trainer, and its
// registry, are gone). A copy of each library here holds a reference for the process's life.
void pin_for_process_lifetime(const boost::dll::shared_library& library) {
  static auto* pinned = new std::vector<boost::dll::shared_library>();  // never destroyed
  pinned->push_back(library);
}

// A plugin is named, never pathed: the name goes into a file name inside each search directory, so
// '/' or ".." (from a config or a checkpoint's) would reach a library outside them.
bool is_plain_name(const std::string& name) {
  return !name.empty() &&
         std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

std::string file_name_for(const std::string& kind, const std::string& name) {
  return "libmgtrain-" + kind + "-" + name + ".so";
}

// Why a plugin with this build fingerprint cannot share objects with this mgtrain, or "". Only the
// standard library and its ABI matter ("libstdc++-12-cxx11abi1"): a plugin built by clang against
// the libstdc++ that gcc built mgtrain against is compatible; the compiler is only named.
std::string fingerprint_mismatch(const std::string& fingerprint) {
  auto split = [](const std::string& f) {
    const auto slash = f.find('/');
    return slash == std::string::npos ? std::pair<std::string, std::string>{"unknown", f}
                                      : std::pair{f.substr(0, slash), f.substr(slash + 1)};
  };
  const auto [compiler, stdlib] = split(fingerprint);
  const auto [own_compiler, own_stdlib] = split(MGT_BUILD_FINGERPRINT);
  if (stdlib == own_stdlib) return "";
  return "was built against the C++ standard library " + stdlib + " (compiler " + compiler +
         "), this mgtrain against " + own_stdlib + " (compiler " + own_compiler +
         "): standard-library objects cross the plugin boundary, so the library and its ABI must match";
}

template <typename Ehdr, typename Phdr, typename Shdr>
std::string elf_extent_problem(int fd, uint64_t file_size) {
  Ehdr header{};
  if (::pread(fd, &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
    return "is " + std::to_string(file_size) + " bytes, shorter than an ELF header (truncated?)";
  const std::string size_text = ", but the file has " + std::to_string(file_size) + " bytes (truncated?)";
  auto table_end = [](uint64_t offset, uint64_t count, uint64_t entry) { return offset + count * entry; };
  if (header.e_phnum > 0 &&
      (header.e_phentsize != sizeof(Phdr) || table_end(header.e_phoff, header.e_phnum, header.e_phentsize) > file_size))
    return "declares its program headers up to byte " +
           std::to_string(table_end(header.e_phoff, header.e_phnum, header.e_phentsize)) + size_text;
  if (header.e_shoff != 0 && header.e_shnum > 0 &&
      (header.e_shentsize != sizeof(Shdr) || table_end(header.e_shoff, header.e_shnum, header.e_shentsize) > file_size))
    return "declares its section headers up to byte " +
           std::to_string(table_end(header.e_shoff, header.e_shnum, header.e_shentsize)) + size_text;
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    Phdr segment{};
    if (::pread(fd, &segment, sizeof segment, static_cast<off_t>(header.e_phoff + i * sizeof segment)) !=
        static_cast<ssize_t>(sizeof segment))
      return "cannot be read: " + std::string(std::strerror(errno ? errno : EIO));
    if (segment.p_offset + segment.p_filesz > file_size || segment.p_offset + segment.p_filesz < segment.p_offset)
      return "declares segment " + std::to_string(i) + " up to byte " +
             std::to_string(segment.p_offset + segment.p_filesz) + size_text;
  }
  return "";
}

// Why the file at `path` must not be handed to the dynamic loader, or "". The loader maps the
// segments the ELF headers declare, and touching a page past the end of a truncated file raises
// SIGBUS; a FIFO or device would block or never end.
std::string elf_file_problem(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "cannot be opened: " + std::string(std::strerror(errno));
  struct stat info {};
  std::string problem;
  unsigned char ident[EI_NIDENT] = {};
  if (::fstat(fd, &info) != 0) {
    problem = "cannot be read: " + std::string(std::strerror(errno));
  } else if (!S_ISREG(info.st_mode)) {
    problem = "is not a regular file (expected a shared library)";
  } else if (::pread(fd, ident, sizeof ident, 0) != static_cast<ssize_t>(sizeof ident) ||
             std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    problem = "is not an ELF shared library (" + std::to_string(info.st_size) + " bytes, no ELF signature)";
  } else if (ident[EI_DATA] == ELFDATA2LSB || ident[EI_DATA] == ELFDATA2MSB) {
    // Another byte order or class is left to the loader, which refuses it with its own message.
    const bool native = (ident[EI_DATA] == ELFDATA2LSB) == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
    if (native && ident[EI_CLASS] == ELFCLASS64)
      problem = elf_extent_problem<Elf64_Ehdr, Elf64_Phdr, Elf64_Shdr>(fd, static_cast<uint64_t>(info.st_size));
    else if (native && ident[EI_CLASS] == ELFCLASS32)
      problem = elf_extent_problem<Elf32_Ehdr, Elf32_Phdr, Elf32_Shdr>(fd, static_cast<uint64_t>(info.st_size));
  }
  ::close(fd);
  return problem;
}

// Why a plugin whose descriptor names kind:name is refused in `file`, or "": the file name must be
// libmgtrain-<kind>-<name>.so of its descriptor. One wording for train's load and for `plugins`.
std::string descriptor_mismatch(const std::string& file, const std::string& kind, const std::string& name) {
  const std::string expected = file_name_for(kind, name);
  if (file == expected) return "";
  return "is the " + kind + " plugin '" + name + "' by its descriptor, so its file must be named " + expected;
}

// Opens a candidate and checks it; returns the reason it is refused, or "" when usable.
std::string open_and_check(const std::string& path, boost::dll::shared_library& library,
                           const PluginDescriptor** descriptor) {
  if (std::string problem = elf_file_problem(path); !problem.empty()) return problem;
  try {
    library.load(path, boost::dll::load_mode::rtld_now);
  } catch (const std::exception& e) {
    // A plugin built against another standard library ABI fails here, on the symbols of ours it
    // cannot find. Bound lazily, nothing of it runs and its descriptor can be read: its build
    // fingerprint then says what is wrong in words, not in a mangled name.
    std::string refusal = "cannot be loaded: " + std::string(e.what());
    try {
      boost::dll::shared_library lazy(path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
      if (lazy.has(MGTRAIN_PLUGIN_SYMBOL)) {
        const auto& d = lazy.get<const PluginDescriptor>(MGTRAIN_PLUGIN_SYMBOL);
        if (sdk_version_refusal(d.abi_version).empty()) {
          const std::string mismatch = fingerprint_mismatch(d.build_fingerprint);
          if (!mismatch.empty()) refusal = mismatch;
        }
      }
    } catch (const std::exception&) {
    }
    return refusal;
  }
  if (!library.has(MGTRAIN_PLUGIN_SYMBOL))
    return "does not export the symbol " MGTRAIN_PLUGIN_SYMBOL " (not an mgtrain plugin?)";
  const auto& d = library.get<const PluginDescriptor>(MGTRAIN_PLUGIN_SYMBOL);
  *descriptor = &d;
  // abi_version is the only field read before it is known to match.
  if (std::string refusal = sdk_version_refusal(d.abi_version); !refusal.empty()) return refusal;
  const std::string refusal = fingerprint_mismatch(d.build_fingerprint);
  if (!refusal.empty()) return refusal;
  if (!d.create) return "has no factory function";
  return "";
}

}  // namespace

PluginRegistry::PluginRegistry(std::vector<std::string> cli_paths) {
  // A directory asked for by name that is not there is a mistake to report, not a place to skip:
  // the plugin would otherwise come silently from further down the search path, or not at all.
  for (auto& p : cli_paths) {
    if (p.empty()) continue;
    struct stat info {};
    if (::stat(p.c_str(), &info) != 0)
      throw PluginError("--plugin-path '" + p + "': " + std::strerror(errno) + " (expected a directory of plugins)");
    if (!S_ISDIR(info.st_mode))
      throw PluginError("--plugin-path '" + p + "': " + std::strerror(ENOTDIR) + " (expected a directory of plugins)");
    // A directory that cannot be listed would be scanned as empty, and the plugin taken from elsewhere.
    if (::access(p.c_str(), R_OK | X_OK) != 0)
      throw PluginError("--plugin-path '" + p + "': " + std::strerror(errno) + " (expected a directory of plugins)");
    dirs_.push_back(p);
  }
  if (const char* env = std::getenv("MGTRAIN_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) dirs_.push_back(item);
  }
  // The installed layout: <prefix>/lib/libmgtrain.so and <prefix>/lib/mgtrain/plugins.
  std::error_code canonical_error;
  const fs::path library_dir =
      fs::weakly_canonical(boost::dll::this_line_location().parent_path().string(), canonical_error);
  dirs_.push_back((library_dir / "mgtrain" / "plugins").string());
#if defined(MGTRAIN_PLUGIN_BUILD_DIR) && defined(MGTRAIN_BUILD_LIBRARY_DIR)
  // The build tree's plugins only for the build tree's own libmgtrain: an installed one must not
  // see (or list as shadowed) the plugins of the tree it was installed from.
  std::error_code build_error;
  if (!canonical_error && fs::weakly_canonical(MGTRAIN_BUILD_LIBRARY_DIR, build_error) == library_dir)
    dirs_.push_back(MGTRAIN_PLUGIN_BUILD_DIR);
#endif
  // Keep the first occurrence of each directory.
  std::vector<std::string> unique;
  for (const auto& d : dirs_)
    if (std::find(unique.begin(), unique.end(), d) == unique.end()) unique.push_back(d);
  dirs_ = unique;
}

const PluginDescriptor& PluginRegistry::load(const std::string& kind, const std::string& name) {
  if (!is_plain_name(name))
    throw PluginError(kind + " plugin name '" + printable(name) +
                      "' is not a plugin name (expected letters, digits and '_'; plugins are found by name in "
                      "the plugin search path, never by a path)");
  for (const auto& l : loaded_)
    if (l->descriptor->kind == kind && l->descriptor->name == name) return *l->descriptor;

  const std::string file = file_name_for(kind, name);
  for (const auto& dir : dirs_) {
    const fs::path path = fs::path(dir) / file;
    std::error_code ec;
    if (fs::exists(path, ec)) return load_from(path.string(), kind, name);
  }
  // A checkpoint names its plugins, never the files to load: where its run found one is only a
  // hint for the refusal (a crafted checkpoint would otherwise run any library's constructors).
  std::string recorded_hint;
  for (const auto& [plugin, path] : recorded_) {
    if (plugin != kind + ":" + name) continue;
    const std::string dir = fs::path(path).parent_path().string();
    recorded_hint = "; " + recorded_origin_ + " loaded it from " + path +
                    ", which is not loaded on a checkpoint's word (pass --plugin-path " + dir + " if you trust it)";
  }

  std::string available, misnamed;
  for (const auto& c : scan()) {
    if (c.usable && c.kind == kind) available += (available.empty() ? "" : ", ") + c.name;
    // A file whose descriptor is the plugin asked for, under another name.
    if (!c.usable && c.kind == kind && c.name == name) misnamed += "; " + c.path + " " + c.refusal;
  }
  std::string searched;
  for (const auto& d : dirs_) searched += (searched.empty() ? "" : ":") + d;
  throw PluginError("unknown " + kind + " plugin '" + name + "': no " + file + " in " + searched + recorded_hint +
                    misnamed + "; available " + kind + " plugins: " + (available.empty() ? "none" : available));
}

// Opens the library at `path`, checks it is the plugin asked for and keeps it loaded.
const PluginDescriptor& PluginRegistry::load_from(const std::string& path, const std::string& kind,
                                                  const std::string& name) {
  auto loaded = std::make_shared<Loaded>();
  loaded->path = path;
  std::string refusal = open_and_check(loaded->path, loaded->library, &loaded->descriptor);
  if (refusal.empty())
    refusal = descriptor_mismatch(file_name_for(kind, name), loaded->descriptor->kind, loaded->descriptor->name);
  if (!refusal.empty()) throw PluginError("plugin '" + loaded->path + "' " + refusal);
  pin_for_process_lifetime(loaded->library);
  loaded_.push_back(loaded);
  return *loaded->descriptor;
}

void PluginRegistry::add_recorded_paths(const std::string& paths, const std::string& origin) {
  recorded_origin_ = origin;
  std::stringstream ss(paths);
  std::string item;
  while (std::getline(ss, item, ';')) {
    const auto eq = item.find('=');
    if (eq != std::string::npos && eq + 1 < item.size())
      recorded_.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
}

std::string PluginRegistry::loaded_paths() const {
  std::string out;
  for (const auto& l : loaded_) {
    std::error_code ec;
    fs::path path = fs::absolute(l->path, ec);
    if (!ec) path = fs::weakly_canonical(path, ec);
    if (!out.empty()) out += ";";
    out += std::string(l->descriptor->kind) + ":" + l->descriptor->name + "=" + (ec ? l->path : path.string());
  }
  return out;
}

std::vector<PluginCandidate> PluginRegistry::scan() {
  std::vector<PluginCandidate> out;
  std::vector<std::string> seen_files;
  for (const auto& dir : dirs_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string f = entry.path().filename().string();
      if (f.rfind("libmgtrain-", 0) == 0 && entry.path().extension() == ".so") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      PluginCandidate c;
      c.path = path.string();
      const std::string file = path.filename().string();
      const bool shadowed = std::find(seen_files.begin(), seen_files.end(), file) != seen_files.end();
      seen_files.push_back(file);
      boost::dll::shared_library library;
      const PluginDescriptor* d = nullptr;
      c.refusal = open_and_check(c.path, library, &d);
      if (d && sdk_version_refusal(d->abi_version).empty()) {
        c.kind = d->kind;
        c.name = d->name;
        c.version = d->version;
        c.description = d->description;
        if (c.refusal.empty()) c.refusal = descriptor_mismatch(file, c.kind, c.name);
      }
      if (c.refusal.empty() && shadowed) {
        c.refusal = "shadowed by an earlier directory in the search path";
        c.shadowed = true;
      }
      c.usable = c.refusal.empty();
      if (c.usable) c.config_keys.assign(d->config_keys, d->config_keys + d->config_key_count);
      out.push_back(c);
      if (c.usable) pin_for_process_lifetime(library);
    }
  }
  return out;
}

std::vector<ConfigKey> PluginRegistry::config_keys(const std::string& kind, const std::string& name) {
  const auto& d = load(kind, name);
  return std::vector<ConfigKey>(d.config_keys, d.config_keys + d.config_key_count);
}

void* PluginRegistry::create(const std::string& kind, const std::string& name, const Config& config) {
  const auto& d = load(kind, name);
  const ConfigSection section(config, kind);
  void* object = d.create(&section);
  if (!object) throw PluginError(kind + " plugin '" + name + "' returned no object");
  return object;
}

std::unique_ptr<Model> PluginRegistry::create_model(const std::string& name, const Config& config) {
  // A model that declares its layers by name (the `layers` model) finds layer plugins through this
  // registry, while it is built and no longer.
  struct LookupWhileBuilding {
    explicit LookupWhileBuilding(PluginRegistry& registry) {
      set_layer_plugin_lookup([&registry](const std::string& kind) { return registry.find_layer(kind); });
    }
    ~LookupWhileBuilding() { set_layer_plugin_lookup(nullptr); }
  } lookup(*this);
  return std::unique_ptr<Model>(static_cast<Model*>(create("model", name, config)));
}

std::string PluginRegistry::locate(const std::string& kind, const std::string& name) {
  if (!is_plain_name(name)) return "";  // no file in the search path can have this name
  for (const auto& dir : dirs_) {
    const fs::path path = fs::path(dir) / file_name_for(kind, name);
    std::error_code ec;
    if (fs::exists(path, ec)) return path.string();
  }
  return "";
}

std::unique_ptr<LayerFactory> PluginRegistry::find_layer(const std::string& kind) {
  const bool loaded = std::any_of(loaded_.begin(), loaded_.end(), [&](const auto& l) {
    return std::string(l->descriptor->kind) == "layer" && l->descriptor->name == kind;
  });
  if (!loaded && locate("layer", kind).empty()) return nullptr;
  static const Config no_keys;  // a layer plugin takes its arguments from its entry, not the config
  const ConfigSection none(no_keys, "layer");
  void* object = load("layer", kind).create(&none);
  if (!object) throw PluginError("layer plugin '" + kind + "' returned no object");
  return std::unique_ptr<LayerFactory>(static_cast<LayerFactory*>(object));
}

std::unique_ptr<Optimizer> PluginRegistry::create_optimizer(const std::string& name, const Config& config) {
  return std::unique_ptr<Optimizer>(static_cast<Optimizer*>(create("optimizer", name, config)));
}

std::unique_ptr<SyncStrategy> PluginRegistry::create_sync(const std::string& name, const Config& config) {
  return std::unique_ptr<SyncStrategy>(static_cast<SyncStrategy*>(create("sync", name, config)));
}

std::unique_ptr<LearningRateSchedule> PluginRegistry::create_schedule(const std::string& name, const Config& config) {
  return std::unique_ptr<LearningRateSchedule>(static_cast<LearningRateSchedule*>(create("schedule", name, config)));
}

std::string PluginRegistry::loaded_summary() const {
  std::string out;
  for (const auto& l : loaded_) {
    if (!out.empty()) out += ";";
    out += std::string(l->descriptor->kind) + ":" + l->descriptor->name + "@" + l->descriptor->version;
  }
  return out;
}

}  // namespace mgt
