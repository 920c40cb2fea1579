// The plugin loader on real shared libraries: the built-in plugins from the build tree, and the
// deliberately wrong ones in test-plugins/.
#include <gtest/gtest.h>

#include <cstdlib>

#include "loader/plugin_loader.hpp"
#include "mgtrain/error.hpp"
#include "runtime/plugin_keys.hpp"

using namespace mgt;

namespace {
const std::string kTestPlugins = MGTRAIN_BINARY_DIR "/test-plugins";

std::string load_error(PluginRegistry& registry, const std::string& kind, const std::string& name) {
  try {
    registry.load(kind, name);
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Plugins, BuiltInPluginsLoadAndDescribeThemselves) {
  PluginRegistry registry;
  const auto& mlp = registry.load("model", "mlp");
  EXPECT_EQ(mlp.abi_version, MGTRAIN_PLUGIN_ABI_VERSION);
  EXPECT_STREQ(mlp.kind, "model");
  EXPECT_STREQ(mlp.build_fingerprint, MGT_BUILD_FINGERPRINT);
  const auto& sgd = registry.load("optimizer", "sgd");
  const auto& allreduce = registry.load("sync", "allreduce");
  EXPECT_EQ(registry.loaded_summary(), std::string("model:mlp@") + mlp.version + ";optimizer:sgd@" + sgd.version +
                                           ";sync:allreduce@" + allreduce.version);
  // Loading again returns the same descriptor: libraries stay loaded.
  EXPECT_EQ(&registry.load("model", "mlp"), &mlp);
}

TEST(Plugins, CreatedModelDeclaresCanonicalNames) {
  PluginRegistry registry;
  Config config = Config::from_string("[model]\nname = mlp\nhidden = 32\n", "test");
  auto keys = registry.config_keys("model", "mlp");
  keys.push_back({"model.name", KeyType::string, nullptr, "model"});
  config.validate(keys);
  auto model = registry.create_model("mlp", config);
  ParameterStore store;
  model->declare(store);
  ASSERT_EQ(store.params().size(), 4u);
  EXPECT_EQ(store.params()[0].name, "fc1.weight");
  EXPECT_EQ(store.params()[0].shape, (Shape{32, 784}));
  EXPECT_EQ(store.params()[3].name, "fc2.bias");
}

TEST(Plugins, RefusesAPluginFromBeforeSdk1NamingFileAndBothVersions) {
  PluginRegistry registry({kTestPlugins});
  const auto msg = load_error(registry, "model", "badabi");
  EXPECT_NE(msg.find("libmgtrain-model-badabi.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("plugin ABI version 19, from before SDK 1.0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("loads plugins built against SDK 1.0 to " + sdk_version_text(MGTRAIN_PLUGIN_ABI_VERSION)),
            std::string::npos)
      << msg;
}

TEST(Plugins, RefusesANewerMinorAndAnotherMajorNamingBothVersions) {
  PluginRegistry registry({kTestPlugins});
  const std::string ours = sdk_version_text(MGTRAIN_PLUGIN_ABI_VERSION);
  const std::string newer =
      std::to_string(MGTRAIN_SDK_VERSION_MAJOR) + "." + std::to_string(MGTRAIN_SDK_VERSION_MINOR + 1);
  auto msg = load_error(registry, "model", "newerminor");
  EXPECT_NE(msg.find("libmgtrain-model-newerminor.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("was built against SDK " + newer + ", newer than this mgtrain's SDK " + ours), std::string::npos)
      << msg;
  msg = load_error(registry, "model", "nextmajor");
  EXPECT_NE(msg.find("was built against SDK " + std::to_string(MGTRAIN_SDK_VERSION_MAJOR + 1) + ".0;"),
            std::string::npos)
      << msg;
}

TEST(Plugins, AcceptsEveryMinorOfItsMajorUpToItsOwn) {
  for (uint32_t minor = 0; minor <= MGTRAIN_SDK_VERSION_MINOR; ++minor)
    EXPECT_EQ(sdk_version_refusal((MGTRAIN_SDK_VERSION_MAJOR << 16) | minor), "") << minor;
  EXPECT_NE(sdk_version_refusal((MGTRAIN_SDK_VERSION_MAJOR << 16) | (MGTRAIN_SDK_VERSION_MINOR + 1)), "");
  EXPECT_NE(sdk_version_refusal((MGTRAIN_SDK_VERSION_MAJOR - 1) << 16), "");
  EXPECT_NE(sdk_version_refusal(19), "");
  EXPECT_EQ(sdk_version_text(19), "0.19");
}

TEST(Plugins, RefusesKindMismatchAndMissingSymbol) {
  PluginRegistry registry({kTestPlugins});
  auto msg = load_error(registry, "model", "wrongkind");
  EXPECT_NE(msg.find("is the sync plugin 'wrongkind' by its descriptor, so its file must be named "
                     "libmgtrain-sync-wrongkind.so"),
            std::string::npos)
      << msg;
  // `mgtrain plugins` says the same of it.
  bool listed = false;
  for (const auto& c : registry.scan())
    if (c.path.find("libmgtrain-model-wrongkind.so") != std::string::npos) {
      listed = true;
      EXPECT_EQ(c.refusal,
                "is the sync plugin 'wrongkind' by its descriptor, so its file must be named "
                "libmgtrain-sync-wrongkind.so");
    }
  EXPECT_TRUE(listed);
  // Asked for by the name in its descriptor, the unknown plugin's line points at the file.
  msg = load_error(registry, "sync", "wrongkind");
  EXPECT_NE(msg.find("unknown sync plugin 'wrongkind'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("libmgtrain-model-wrongkind.so is the sync plugin 'wrongkind' by its descriptor"),
            std::string::npos)
      << msg;
  msg = load_error(registry, "model", "nosymbol");
  EXPECT_NE(msg.find("does not export the symbol mgtrain_plugin_descriptor"), std::string::npos) << msg;
}

TEST(Plugins, UnknownPluginListsWhatIsAvailable) {
  PluginRegistry registry;
  const auto msg = load_error(registry, "optimizer", "lamb");
  EXPECT_NE(msg.find("unknown optimizer plugin 'lamb'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("adam, sgd"), std::string::npos) << msg;
}

TEST(Plugins, ScanReportsEveryCandidateAndWhyItWasRefused) {
  PluginRegistry registry({kTestPlugins});
  int usable = 0, refused = 0;
  for (const auto& c : registry.scan()) {
    if (c.usable)
      ++usable;
    else
      ++refused;
    if (c.path.find("badabi") != std::string::npos) EXPECT_NE(c.refusal.find("version 19"), std::string::npos);
    if (c.path.find("wrongkind") != std::string::npos)
      EXPECT_NE(c.refusal.find("by its descriptor, so its file must be named"), std::string::npos) << c.refusal;
  }
  // badabi, newerminor, nextmajor, wrongkind, nosymbol.
  EXPECT_EQ(refused, 5);
  EXPECT_GE(usable, 5);
}

TEST(Plugins, SearchOrderPutsCommandLineThenEnvironmentFirst) {
  setenv("MGTRAIN_PLUGIN_PATH", "/env/a:/env/b", 1);
  PluginRegistry registry({kTestPlugins});
  unsetenv("MGTRAIN_PLUGIN_PATH");
  const auto dirs = registry.search_dirs();
  ASSERT_GE(dirs.size(), 4u);
  EXPECT_EQ(dirs[0], kTestPlugins);
  EXPECT_EQ(dirs[1], "/env/a");
  EXPECT_EQ(dirs[2], "/env/b");
  EXPECT_EQ(dirs.back(), MGTRAIN_BINARY_DIR "/plugins");
}

TEST(Plugins, APluginPathThatIsNoDirectoryIsNamedWithTheReason) {
  try {
    PluginRegistry registry({"/nonexistent/plugins"});
    FAIL();
  } catch (const PluginError& e) {
    EXPECT_STREQ(e.what(),
                 "--plugin-path '/nonexistent/plugins': No such file or directory (expected a directory of plugins)");
  }
  try {
    PluginRegistry registry({"/etc/hostname"});
    FAIL();
  } catch (const PluginError& e) {
    EXPECT_STREQ(e.what(), "--plugin-path '/etc/hostname': Not a directory (expected a directory of plugins)");
  }
}

TEST(Plugins, KeysOfAnotherPluginOfTheKindAreDroppedWithANote) {
  PluginRegistry registry;
  Config config = Config::from_string(
      "[model]\nname = mlp\n[optimizer]\nname = adam\nlr = 0.01\nmomentum = 0.9\nnesterov = true\n"
      "[sync]\nbucket_mb = 4\n",
      "run.ini");
  const std::string note = drop_keys_of_unchosen_plugins(registry, config);
  EXPECT_EQ(note,
            "ignoring config keys of plugins not chosen: optimizer.momentum, optimizer.nesterov "
            "(optimizer sgd, not the chosen optimizer adam)");
  EXPECT_FALSE(config.has("optimizer.momentum"));
  EXPECT_FALSE(config.has("optimizer.nesterov"));
  EXPECT_TRUE(config.has("optimizer.lr"));
  EXPECT_TRUE(config.has("sync.bucket_mb"));  // the default sync strategy's own key
  EXPECT_TRUE(registry.loaded_summary().find("sgd") == std::string::npos) << registry.loaded_summary();
}

TEST(Plugins, AKeyOfNoPluginStaysForValidationToRefuse) {
  PluginRegistry registry;
  Config config = Config::from_string("[model]\nname = mlp\nhiden = 64\n[optimizer]\nname = sgd\n", "run.ini");
  EXPECT_EQ(drop_keys_of_unchosen_plugins(registry, config), "");
  EXPECT_TRUE(config.has("model.hiden"));
}

TEST(Plugins, AcceptsAFingerprintThatDiffersOnlyInTheCompiler) {
  PluginRegistry registry({kTestPlugins + "/fingerprint"});
  EXPECT_EQ(load_error(registry, "model", "othercompiler"), "");
  EXPECT_EQ(std::string(registry.load("model", "othercompiler").build_fingerprint),
            std::string("othercc-99/") + MGT_STDLIB_ID);
}

TEST(Plugins, RefusesAnotherStandardLibraryNamingBoth) {
  PluginRegistry registry({kTestPlugins + "/fingerprint"});
  const auto msg = load_error(registry, "model", "otherstdlib");
  EXPECT_NE(msg.find("libmgtrain-model-otherstdlib.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("standard library libc++-99000-abi1"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string("this mgtrain against ") + MGT_STDLIB_ID), std::string::npos) << msg;
}

// Built for real with -D_GLIBCXX_USE_CXX11_ABI=0: the dynamic loader fails on an undefined symbol
// of the old ABI before the descriptor is read, and the refusal must still be the fingerprint's.
TEST(Plugins, RefusesTheOtherLibstdcxxAbiByItsFingerprint) {
  PluginRegistry registry({kTestPlugins + "/old-abi"});
  const auto msg = load_error(registry, "model", "oldabi");
  EXPECT_NE(msg.find("libmgtrain-model-oldabi.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-cxx11abi0"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string("this mgtrain against ") + MGT_STDLIB_ID), std::string::npos) << msg;
  EXPECT_EQ(msg.find("undefined symbol"), std::string::npos) << msg;
}

// A checkpoint names plugins, never files: a recorded path is named in the refusal, not loaded.
TEST(Plugins, ARecordedPathIsNeverLoaded) {
  const std::string path = kTestPlugins + "/fingerprint/libmgtrain-model-othercompiler.so";
  PluginRegistry registry;
  registry.add_recorded_paths("model:othercompiler=" + path, "the checkpoint's run");
  const auto msg = load_error(registry, "model", "othercompiler");
  EXPECT_NE(msg.find("the checkpoint's run loaded it from " + path +
                     ", which is not loaded on a checkpoint's word (pass --plugin-path " + kTestPlugins +
                     "/fingerprint if you trust it)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(registry.loaded_paths(), "");
}

// The name goes into a file name inside each search directory: never a path out of them.
TEST(Plugins, RefusesANameThatIsAPath) {
  PluginRegistry registry({kTestPlugins});
  for (const std::string name : {"../test-plugins/badabi", "a/b", "..", ""}) {
    const auto msg = load_error(registry, "model", name);
    EXPECT_NE(msg.find("is not a plugin name (expected letters, digits and '_'"), std::string::npos) << msg;
  }
  EXPECT_EQ(registry.find_layer("../x"), nullptr);
}

TEST(Plugins, TheSearchPathWinsOverARecordedPath) {
  PluginRegistry registry;
  registry.add_recorded_paths("model:mlp=/elsewhere/libmgtrain-model-mlp.so", "the checkpoint's run");
  registry.load("model", "mlp");
  EXPECT_EQ(registry.loaded_paths().find("/elsewhere"), std::string::npos) << registry.loaded_paths();
}
