// Checkpoint files: round trip, readability by plain HDF5 tools, checksums, shape checks, the
// `latest` pointer and pruning, and that a failed write leaves the previous checkpoint alone.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "datasets/hdf5_format.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/optimizer.hpp"
#include "mgtrain/parameters.hpp"

namespace fs = std::filesystem;

namespace {

// One state buffer ("momentum"), enough to exercise the /optimizer group.
class TestOptimizer : public mgt::Optimizer {
 public:
  explicit TestOptimizer(std::vector<std::string> names = {"momentum"}) : names_(std::move(names)) {}
  void setup(size_t size) override { buffers_.assign(names_.size(), std::vector<float>(size, 0.0f)); }
  void step(float*, const float*, size_t) override { ++step_count_; }
  double learning_rate() const override { return 0.1; }
  void set_learning_rate(double) override {}
  std::vector<mgt::OptimizerStateBuffer> state_buffers() override {
    std::vector<mgt::OptimizerStateBuffer> out;
    for (size_t i = 0; i < names_.size(); ++i) out.push_back({names_[i], buffers_[i].data()});
    return out;
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<float>> buffers_;
};

// fc1.weight [3, 4] and fc1.bias [3]; values derived from `base` so two stores differ.
std::unique_ptr<mgt::ParameterStore> make_store(float base, const mgt::Shape& w_shape = {3, 4},
                                                const std::string& bias_name = "fc1.bias") {
  auto store = std::make_unique<mgt::ParameterStore>();
  store->declare("fc1.weight", w_shape, mgt::Init::zeros, 4);
  store->declare(bias_name, {3}, mgt::Init::zeros, 4);
  store->finalize();
  for (const auto& p : store->params())
    for (size_t i = 0; i < p.numel; ++i)
      store->params_data()[p.offset + i] = base + static_cast<float>(p.offset + i) * 0.25f;
  return store;
}

mgt::CheckpointMeta make_meta(int64_t step) {
  mgt::CheckpointMeta meta;
  meta.step = step;
  meta.epoch = 3;
  meta.batch_in_epoch = 17;
  meta.global_batch = 64;
  meta.seed = 0xfedcba9876543210ull;  // above INT64_MAX: must survive as uint64
  meta.world_size = 4;
  meta.mgtrain_version = "0.1.0";
  meta.plugins = "model:mlp@1.0.0;optimizer:sgd@1.0.0;sync:allreduce@1.0.0";
  meta.plugin_paths = "optimizer:sgd=/opt/plugins/libmgtrain-optimizer-sgd.so";
  meta.config_ini =
      "[optimizer]\nlr = 0.1\nmomentum = 0.9\n\n[train]\nglobal_batch = 64\nseed = 18364758544493064720\n";
  return meta;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("mgtrain-ckpt-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    mgt::allow_unchecked_checkpoints(false);
    fs::remove_all(dir_);
  }

  std::string ckdir() const { return (dir_ / "ckpt").string(); }

  // Writes a checkpoint of a fresh store and optimizer (momentum = params * 2) at `step`.
  std::string write(int64_t step, int64_t keep = 0, float base = 1.0f) {
    auto store = make_store(base);
    TestOptimizer opt;
    opt.setup(store->flat_size());
    fill_state(opt, *store);
    opt.set_step_count(step);
    return mgt::write_checkpoint(ckdir(), make_meta(step), *store, &opt, keep);
  }

  static void fill_state(TestOptimizer& opt, const mgt::ParameterStore& store) {
    float* m = opt.state_buffers()[0].data;
    for (size_t i = 0; i < store.flat_size(); ++i) m[i] = store.params_data()[i] * 2.0f;
  }

  static std::string read_text(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::vector<std::string> listing(const std::string& dir) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

template <typename E, typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

TEST_F(CheckpointTest, RoundTripRestoresParametersStateAndMeta) {
  auto saved = make_store(1.0f);
  TestOptimizer saved_opt;
  saved_opt.setup(saved->flat_size());
  fill_state(saved_opt, *saved);
  saved_opt.set_step_count(120);
  const std::string path = mgt::write_checkpoint(ckdir(), make_meta(120), *saved, &saved_opt, 0);
  EXPECT_EQ(path, (fs::path(ckdir()) / "step-120.h5").string());
  ASSERT_TRUE(fs::exists(path));
  EXPECT_EQ(read_text(fs::path(ckdir()) / "latest"), "step-120.h5\n");

  auto loaded = make_store(-7.0f);
  TestOptimizer loaded_opt;
  loaded_opt.setup(loaded->flat_size());
  const mgt::CheckpointMeta meta = mgt::load_checkpoint(path, *loaded, &loaded_opt);

  for (const auto& p : saved->params())
    for (size_t i = 0; i < p.numel; ++i) {
      EXPECT_EQ(loaded->params_data()[p.offset + i], saved->params_data()[p.offset + i]) << p.name << "[" << i << "]";
      EXPECT_EQ(loaded_opt.state_buffers()[0].data[p.offset + i], saved->params_data()[p.offset + i] * 2.0f)
          << "momentum " << p.name << "[" << i << "]";
    }
  EXPECT_EQ(loaded_opt.step_count(), 120);

  const mgt::CheckpointMeta expected = make_meta(120);
  for (const auto& m : {meta, mgt::read_checkpoint_meta(path)}) {
    EXPECT_EQ(m.step, 120);
    EXPECT_EQ(m.epoch, expected.epoch);
    EXPECT_EQ(m.batch_in_epoch, expected.batch_in_epoch);
    EXPECT_EQ(m.global_batch, expected.global_batch);
    EXPECT_EQ(m.seed, expected.seed);
    EXPECT_EQ(m.world_size, expected.world_size);
    EXPECT_EQ(m.mgtrain_version, expected.mgtrain_version);
    EXPECT_EQ(m.plugins, expected.plugins);
    EXPECT_EQ(m.plugin_paths, expected.plugin_paths);
    EXPECT_EQ(m.config_ini, expected.config_ini);
  }
}

TEST_F(CheckpointTest, LoadWithoutOptimizerLoadsParametersOnly) {
  const std::string path = write(5);
  auto loaded = make_store(-7.0f);
  const auto meta = mgt::load_checkpoint(path, *loaded, nullptr);
  EXPECT_EQ(meta.step, 5);
  EXPECT_EQ(loaded->params_data()[0], 1.0f);
}

TEST_F(CheckpointTest, ReadableByH5dump) {
  if (!fs::exists("/usr/bin/h5dump")) GTEST_SKIP() << "/usr/bin/h5dump not installed";
  const std::string path = write(7);
  auto run = [](const std::string& cmd) {
    std::string out;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
    EXPECT_EQ(::pclose(pipe), 0) << cmd << "\n" << out;
    return out;
  };
  const std::string listing = run("/usr/bin/h5dump -n '" + path + "' 2>&1");
  EXPECT_NE(listing.find("/params/fc1.weight"), std::string::npos) << listing;
  EXPECT_NE(listing.find("/params/fc1.bias"), std::string::npos) << listing;
  EXPECT_NE(listing.find("/optimizer/momentum/fc1.weight"), std::string::npos) << listing;

  const std::string header = run("/usr/bin/h5dump -H -A '" + path + "' 2>&1");
  EXPECT_NE(header.find("DATASPACE  SIMPLE { ( 3, 4 ) / ( 3, 4 ) }"), std::string::npos) << header;
  EXPECT_NE(header.find("H5T_IEEE_F32LE"), std::string::npos) << header;
  for (const char* attr :
       {"step", "epoch", "batch_in_epoch", "seed", "world_size", "mgtrain_version", "plugins", "plugin_paths", "config",
        "format_version", "crc32", "optimizer_steps", "global_batch", "samples_in_epoch", "attributes_crc32"})
    EXPECT_NE(header.find("ATTRIBUTE \"" + std::string(attr) + "\""), std::string::npos) << attr;

  const std::string config = run("/usr/bin/h5dump -a /config '" + path + "' 2>&1");
  EXPECT_NE(config.find("momentum = 0.9"), std::string::npos) << config;
  const std::string weights = run("/usr/bin/h5dump -d /params/fc1.bias '" + path + "' 2>&1");
  // fc1.bias is the second parameter, at offset 16: 1 + 16*0.25 = 5, then 5.25, 5.5.
  EXPECT_NE(weights.find("5, 5.25, 5.5"), std::string::npos) << weights;
}

TEST_F(CheckpointTest, CorruptedDatasetFailsChecksum) {
  const std::string path = write(9);
  // Find where /params/fc1.weight's contiguous data lies in the file and flip one byte there.
  haddr_t offset = HADDR_UNDEF;
  {
    std::lock_guard lock(mgt::data::hdf5_mutex());
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    const hid_t dset = H5Dopen2(file, "/params/fc1.weight", H5P_DEFAULT);
    ASSERT_GE(dset, 0);
    offset = H5Dget_offset(dset);
    H5Dclose(dset);
    H5Fclose(file);
  }
  ASSERT_NE(offset, HADDR_UNDEF);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset + 5));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x40);
    f.seekp(static_cast<std::streamoff>(offset + 5));
    f.write(&byte, 1);
  }
  auto store = make_store(-7.0f);
  const float before = store->params_data()[0];
  const std::string msg = error_message<mgt::IoError>([&] { mgt::load_checkpoint(path, *store, nullptr); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("/params/fc1.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
  EXPECT_EQ(store->params_data()[0], before) << "a failed load must leave the model untouched";
}

// Rewrites or deletes a root attribute behind the writer's back, as a damaged or hand-edited file.
void set_root_attr(const std::string& path, const char* name, int64_t value) {
  std::lock_guard lock(mgt::data::hdf5_mutex());
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t attr = H5Aopen(file, name, H5P_DEFAULT);
  ASSERT_GE(attr, 0) << name;
  EXPECT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &value), 0);
  H5Aclose(attr);
  H5Fclose(file);
}

void delete_attr(const std::string& path, const char* object, const char* name) {
  std::lock_guard lock(mgt::data::hdf5_mutex());
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  if (H5Aexists_by_name(file, object, name, H5P_DEFAULT) > 0)
    EXPECT_GE(H5Adelete_by_name(file, object, name, H5P_DEFAULT), 0);
  H5Fclose(file);
}

// What a checkpoint written before the attribute checksum and the sample position looks like.
void make_old_format(const std::string& path) {
  for (const char* name : {"attributes_crc32", "global_batch", "samples_in_epoch"}) delete_attr(path, "/", name);
  delete_attr(path, "/optimizer", "attributes_crc32");
  set_root_attr(path, "format_version", 1);
}

TEST_F(CheckpointTest, ACheckpointThatLostItsAttributeChecksumIsRefused) {
  auto store = make_store(0.0f);
  TestOptimizer opt;
  opt.setup(store->flat_size());
  const std::string root = write(50);
  delete_attr(root, "/", "attributes_crc32");
  set_root_attr(root, "step", 1000000);
  std::string msg = error_message<mgt::IoError>([&] { mgt::load_checkpoint(root, *store, &opt); });
  EXPECT_NE(msg.find("checkpoint '" + root + "': the root group has no attribute 'attributes_crc32'"),
            std::string::npos)
      << msg;
  // Format 1 with the attributes written beside the checksum: it was there, and is gone.
  set_root_attr(root, "format_version", 1);
  msg = error_message<mgt::IoError>([&] { mgt::read_checkpoint_meta(root); });
  EXPECT_NE(msg.find("'global_batch' and 'samples_in_epoch'"), std::string::npos) << msg;

  const std::string optimizer = write(51);
  delete_attr(optimizer, "/optimizer", "attributes_crc32");
  msg = error_message<mgt::IoError>([&] { mgt::load_checkpoint(optimizer, *store, &opt); });
  EXPECT_NE(msg.find("group '/optimizer' has no attribute 'attributes_crc32'"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, RootAttributesAreCoveredByAChecksum) {
  const std::string path = write(30);
  set_root_attr(path, "step", -5);
  auto store = make_store(0.0f);
  for (const auto& msg : {error_message<mgt::IoError>([&] { mgt::load_checkpoint(path, *store, nullptr); }),
                          error_message<mgt::IoError>([&] { mgt::read_checkpoint_meta(path); }),
                          error_message<mgt::IoError>([&] { mgt::read_checkpoint_group(path, "/params"); })}) {
    EXPECT_NE(msg.find("checkpoint '" + path + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("root attributes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
  }
  const std::string optimizer_path = write(31);
  {
    std::lock_guard lock(mgt::data::hdf5_mutex());
    const hid_t file = H5Fopen(optimizer_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    // Through the group: HDF5 1.10 cannot write an attribute opened with H5Aopen_by_name.
    const hid_t group = H5Gopen2(file, "/optimizer", H5P_DEFAULT);
    const hid_t attr = H5Aopen(group, "optimizer_steps", H5P_DEFAULT);
    const int64_t steps = 1000000;
    EXPECT_GE(H5Awrite(attr, H5T_NATIVE_INT64, &steps), 0);
    H5Aclose(attr);
    H5Gclose(group);
    H5Fclose(file);
  }
  TestOptimizer opt;
  opt.setup(store->flat_size());
  const std::string msg = error_message<mgt::IoError>([&] { mgt::load_checkpoint(optimizer_path, *store, &opt); });
  EXPECT_NE(msg.find("'/optimizer'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
}

// model.init_from's provenance round-trips, is covered by the root's checksum (deleted, the file
// is refused), and is absent from a run's checkpoints that did not start from another run.
TEST_F(CheckpointTest, InitFromProvenanceIsKeptAndCoveredByTheChecksum) {
  auto store = make_store(1.0f);
  mgt::CheckpointMeta meta = make_meta(40);
  meta.init_from = "/runs/pre/step-200.h5";
  meta.init_from_sha256 = std::string(64, 'a');
  const std::string path = mgt::write_checkpoint(ckdir(), meta, *store, nullptr, 0);
  const mgt::CheckpointMeta read = mgt::read_checkpoint_meta(path);
  EXPECT_EQ(read.init_from, meta.init_from);
  EXPECT_EQ(read.init_from_sha256, meta.init_from_sha256);
  const mgt::CheckpointContents model = mgt::read_checkpoint_model(path);
  EXPECT_EQ(model.meta.init_from, meta.init_from);
  ASSERT_EQ(model.params.size(), 2u);
  EXPECT_TRUE(model.optimizer.empty());
  EXPECT_TRUE(mgt::read_checkpoint_meta(write(41)).init_from.empty());

  delete_attr(path, "/", "init_from");
  delete_attr(path, "/", "init_from_sha256");
  const std::string msg = error_message<mgt::IoError>([&] { mgt::read_checkpoint_model(path); });
  EXPECT_NE(msg.find("root attributes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
}

// An attribute read as one value that holds many (a hand-edited file) is refused, not read past
// the value it is read into.
TEST_F(CheckpointTest, AnAttributeHoldingManyValuesIsRefused) {
  for (const char* name : {"step", "config"}) {
    const std::string path = write(32);
    delete_attr(path, "/", name);
    {
      std::lock_guard lock(mgt::data::hdf5_mutex());
      const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      ASSERT_GE(file, 0);
      const hsize_t n = 4000;
      const std::vector<int64_t> values(n, 7);
      const hid_t space = H5Screate_simple(1, &n, nullptr);
      const hid_t attr = H5Acreate2(file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
      EXPECT_GE(H5Awrite(attr, H5T_NATIVE_INT64, values.data()), 0);
      H5Aclose(attr);
      H5Sclose(space);
      H5Fclose(file);
    }
    const std::string msg = error_message<mgt::IoError>([&] { mgt::read_checkpoint_meta(path); });
    EXPECT_NE(msg.find(std::string("attribute '") + name + "' of the root group holds 4000 values, not one"),
              std::string::npos)
        << msg;
  }
}

// Without the root's checksum a file's step and parameters can be edited and the format lowered to
// pass as one written before checksums: refused, naming --allow-unchecked, unless that is given.
TEST_F(CheckpointTest, ACheckpointOlderThanChecksumsIsReadOnlyWhenAllowed) {
  const std::string path = write(40);
  make_old_format(path);
  set_root_attr(path, "step", 1000);
  auto store = make_store(0.0f);
  for (const auto& msg : {error_message<mgt::IoError>([&] { mgt::load_checkpoint(path, *store, nullptr); }),
                          error_message<mgt::IoError>([&] { mgt::read_checkpoint_meta(path); }),
                          error_message<mgt::IoError>([&] { mgt::read_checkpoint_contents(path); })})
    EXPECT_NE(msg.find("checkpoint '" + path +
                       "' has format_version 1 without attribute checksums (written before they were added, or "
                       "edited to look so): its step, config and attributes cannot be verified; refused "
                       "(--allow-unchecked reads it anyway)"),
              std::string::npos)
        << msg;
  mgt::allow_unchecked_checkpoints(true);
  EXPECT_EQ(mgt::read_checkpoint_meta(path).step, 1000);
}

TEST_F(CheckpointTest, OldCheckpointWithoutAttributeChecksumLoadsAndIsValidated) {
  mgt::allow_unchecked_checkpoints(true);
  const std::string path = write(40);
  make_old_format(path);
  auto store = make_store(0.0f);
  TestOptimizer opt;
  opt.setup(store->flat_size());
  const mgt::CheckpointMeta meta = mgt::load_checkpoint(path, *store, &opt);
  EXPECT_EQ(meta.step, 40);
  EXPECT_EQ(meta.batch_in_epoch, 17);

  struct Bad {
    const char* attr;
    int64_t value;
    const char* expected;
  };
  for (const Bad& bad : {Bad{"step", -5, "attribute 'step' = -5"}, Bad{"epoch", -1, "attribute 'epoch' = -1"},
                         Bad{"batch_in_epoch", -3, "attribute 'batch_in_epoch' = -3"},
                         Bad{"world_size", 0, "attribute 'world_size' = 0"}}) {
    const std::string damaged = write(41);
    make_old_format(damaged);
    set_root_attr(damaged, bad.attr, bad.value);
    for (const auto& msg : {error_message<mgt::DataError>([&] { mgt::load_checkpoint(damaged, *store, nullptr); }),
                            error_message<mgt::DataError>([&] { mgt::read_checkpoint_meta(damaged); })}) {
      EXPECT_NE(msg.find("checkpoint '" + damaged + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(bad.expected), std::string::npos) << msg;
    }
  }
}

TEST_F(CheckpointTest, NonFiniteParametersOrStateAreRefusedNamingTheDataset) {
  auto store = make_store(1.0f);
  TestOptimizer opt;
  opt.setup(store->flat_size());
  fill_state(opt, *store);
  store->params_data()[5] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_params = mgt::write_checkpoint(ckdir(), make_meta(50), *store, &opt, 0);
  store->params_data()[5] = 1.0f;
  opt.state_buffers()[0].data[store->params()[1].offset + 1] = -std::numeric_limits<float>::infinity();  // fc1.bias[1]
  const std::string inf_state = mgt::write_checkpoint(ckdir(), make_meta(60), *store, &opt, 0);

  auto loaded = make_store(-7.0f);
  TestOptimizer loaded_opt;
  loaded_opt.setup(loaded->flat_size());
  for (const auto& msg : {error_message<mgt::DataError>([&] { mgt::load_checkpoint(nan_params, *loaded, nullptr); }),
                          error_message<mgt::DataError>([&] { mgt::read_checkpoint_group(nan_params, "/params"); })}) {
    EXPECT_NE(msg.find("checkpoint '" + nan_params + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'/params/fc1.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nan"), std::string::npos) << msg;
  }
  const std::string msg = error_message<mgt::DataError>([&] { mgt::load_checkpoint(inf_state, *loaded, &loaded_opt); });
  EXPECT_NE(msg.find("'/optimizer/momentum/fc1.bias'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-inf"), std::string::npos) << msg;
  EXPECT_EQ(loaded->params_data()[0], -7.0f) << "a refused load must leave the model untouched";
}

TEST_F(CheckpointTest, OldCheckpointTakesItsGlobalBatchFromItsConfig) {
  const std::string path = write(40);
  EXPECT_EQ(mgt::read_checkpoint_meta(path).global_batch, 64);
  mgt::allow_unchecked_checkpoints(true);
  make_old_format(path);
  EXPECT_EQ(mgt::read_checkpoint_meta(path).global_batch, 64) << "taken from the stored config";
}

TEST(ResumePosition, SameSampleUnderAnotherGlobalBatchOrRefusedWithBothValues) {
  mgt::CheckpointMeta meta = make_meta(30);
  meta.epoch = 0;
  meta.batch_in_epoch = 30;
  meta.global_batch = 128;  // sample 3840
  const std::string path = "/runs/a/step-30.h5";
  // 60000 samples: 468 batches of 128, 234 of 256, 600 of 100.
  auto same = mgt::resume_position(path, meta, 128, 60000, 468);
  EXPECT_EQ(same.epoch, 0);
  EXPECT_EQ(same.batch_in_epoch, 30);
  EXPECT_EQ(same.note, "");
  auto larger = mgt::resume_position(path, meta, 256, 60000, 234);
  EXPECT_EQ(larger.epoch, 0);
  EXPECT_EQ(larger.batch_in_epoch, 15);
  EXPECT_NE(larger.note.find("sample 3840"), std::string::npos) << larger.note;
  const std::string msg = error_message<mgt::ConfigError>([&] { mgt::resume_position(path, meta, 100, 60000, 600); });
  for (const char* part : {"checkpoint '/runs/a/step-30.h5'", "sample 3840", "train.global_batch = 100", "128"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in " << msg;
  // The last full batch of 128 starts at 59776; under 64 that is batch 934, the last full one.
  meta.batch_in_epoch = 467;
  EXPECT_EQ(mgt::resume_position(path, meta, 64, 60000, 937).batch_in_epoch, 934);
  // Under 32 at 59776 = 1868 x 32: within the 1875 batches of 32.
  EXPECT_EQ(mgt::resume_position(path, meta, 32, 60000, 1875).batch_in_epoch, 1868);
}

TEST(ResumePosition, PositionPastTheDataIsRefusedNamingTheAttribute) {
  mgt::CheckpointMeta meta = make_meta(30);
  meta.global_batch = 128;
  meta.batch_in_epoch = 1000000000000;
  const std::string msg =
      error_message<mgt::DataError>([&] { mgt::resume_position("/runs/a/step-30.h5", meta, 128, 60000, 468); });
  for (const char* part : {"checkpoint '/runs/a/step-30.h5'", "'batch_in_epoch' = 1000000000000", "60000 samples"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in " << msg;
  meta.batch_in_epoch = 468;  // one past the last batch of 128
  error_message<mgt::DataError>([&] { mgt::resume_position("/runs/a/step-30.h5", meta, 128, 60000, 468); });
}

TEST_F(CheckpointTest, DirectoryLockIsExclusiveAndNamesItsHolder) {
  std::string msg;
  {
    mgt::CheckpointDirLock first(ckdir());
    EXPECT_TRUE(fs::is_directory(ckdir()));
    msg = error_message<mgt::IoError>([&] { mgt::CheckpointDirLock second(ckdir()); });
    EXPECT_NE(msg.find("checkpoint.dir '" + ckdir() + "' is in use by another job"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pid " + std::to_string(::getpid())), std::string::npos) << msg;
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    EXPECT_NE(msg.find("host " + std::string(host)), std::string::npos) << msg;
  }
  mgt::CheckpointDirLock again(ckdir());  // released with its holder
}

TEST_F(CheckpointTest, DirectoryThatIsAFileIsRefusedWithTheErrnoText) {
  const std::string file = (dir_ / "plainfile").string();
  std::ofstream(file) << "x";
  for (const std::string& dir : {file, file + "/ckpt"}) {
    const std::string msg = error_message<mgt::IoError>([&] { mgt::CheckpointDirLock lock(dir); });
    EXPECT_NE(msg.find("checkpoint.dir '" + dir + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Not a directory"), std::string::npos) << msg;
  }
}

TEST_F(CheckpointTest, CheckpointsOfAnotherRunAreFoundUnlessThisRunContinuesThem) {
  EXPECT_EQ(mgt::checkpoint_of_another_run(ckdir(), ""), "");
  write(10);
  const std::string newest = write(20);
  EXPECT_EQ(mgt::checkpoint_of_another_run(ckdir(), ""), newest);
  EXPECT_EQ(mgt::checkpoint_of_another_run(ckdir(), "latest"), "");
  EXPECT_EQ(mgt::checkpoint_of_another_run(ckdir(), (fs::path(ckdir()) / "step-10.h5").string()), "");
  EXPECT_EQ(mgt::checkpoint_of_another_run(ckdir(), (dir_ / "elsewhere" / "step-10.h5").string()), newest);
  // Resuming from the older one of this directory rolls back past the newer.
  EXPECT_EQ(mgt::checkpoints_after(ckdir(), (fs::path(ckdir()) / "step-10.h5").string()),
            std::vector<std::string>{newest});
  EXPECT_TRUE(mgt::checkpoints_after(ckdir(), "latest").empty());
  EXPECT_TRUE(mgt::checkpoints_after(ckdir(), "").empty());
  // checkpoint.overwrite: the replaced checkpoints go once this run's first one is in place.
  auto store = make_store(1.0f);
  TestOptimizer opt;
  opt.setup(store->flat_size());
  int removed = -1;
  const std::string mine =
      mgt::write_checkpoint(ckdir(), make_meta(5), *store, &opt, 0, mgt::list_checkpoints(ckdir()), &removed);
  EXPECT_EQ(removed, 2);
  EXPECT_EQ(mgt::list_checkpoints(ckdir()), std::vector<std::string>{mine});
  EXPECT_EQ(mgt::checkpoint_of_another_run(ckdir(), "latest"), "");
}

TEST_F(CheckpointTest, ShapeMismatchNamesParameterAndBothShapes) {
  const std::string path = write(11);
  auto store = make_store(0.0f, {5, 4});
  const std::string msg = error_message<mgt::DataError>([&] { mgt::load_checkpoint(path, *store, nullptr); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'fc1.weight' has shape [3, 4], the model expects [5, 4]"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, MissingAndExtraParametersAreErrors) {
  const std::string path = write(12);
  // The model has fc3.bias instead of fc1.bias: the file lacks one parameter...
  auto other = make_store(0.0f, {3, 4}, "fc3.bias");
  std::string msg = error_message<mgt::DataError>([&] { mgt::load_checkpoint(path, *other, nullptr); });
  EXPECT_NE(msg.find("checkpoint '" + path + "' has no parameter 'fc3.bias'"), std::string::npos) << msg;

  // ...and a model with only fc1.weight finds fc1.bias left over.
  mgt::ParameterStore small;
  small.declare("fc1.weight", {3, 4}, mgt::Init::zeros, 4);
  small.finalize();
  msg = error_message<mgt::DataError>([&] { mgt::load_checkpoint(path, small, nullptr); });
  EXPECT_NE(msg.find("'fc1.bias'"), std::string::npos) << msg;
}

// A sync strategy's counters (a parameter server's updates and each worker's steps) and arrays (a
// residual) come back as written; a damaged one, or a shard of the state that is missing, is named.
// A checkpoint as format_version 1 wrote it: root and /optimizer checksums, none on /sync. The root
// checksum covers the version, so it is computed again, by the rule the format documents.
void make_format_one(const std::string& path, const mgt::CheckpointMeta& meta) {
  std::string text;
  const auto add = [&](const std::string& name, const std::string& value) {
    text += name + "=" + std::to_string(value.size()) + ":" + value + "\n";
  };
  add("format_version", "1");
  add("step", std::to_string(meta.step));
  add("epoch", std::to_string(meta.epoch));
  add("batch_in_epoch", std::to_string(meta.batch_in_epoch));
  add("samples_in_epoch", std::to_string(meta.batch_in_epoch * meta.global_batch));
  add("global_batch", std::to_string(meta.global_batch));
  add("seed", std::to_string(meta.seed));
  add("world_size", std::to_string(meta.world_size));
  add("mgtrain_version", meta.mgtrain_version);
  add("plugins", meta.plugins);
  add("plugin_paths", meta.plugin_paths);
  add("config", meta.config_ini);
  set_root_attr(path, "format_version", 1);
  delete_attr(path, "/sync", "attributes_crc32");
  std::lock_guard lock(mgt::data::hdf5_mutex());
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t attr = H5Aopen(file, "attributes_crc32", H5P_DEFAULT);
  uint32_t crc = 0xFFFFFFFFu;  // zlib's CRC-32, bit by bit
  for (unsigned char byte : text) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  crc ^= 0xFFFFFFFFu;
  EXPECT_GE(H5Awrite(attr, H5T_NATIVE_UINT32, &crc), 0);
  H5Aclose(attr);
  H5Fclose(file);
}

TEST_F(CheckpointTest, FormatOneWithItsChecksumsStillLoads) {
  auto store = make_store(1.0f);
  TestOptimizer opt;
  opt.setup(store->flat_size());
  mgt::CheckpointMeta meta = make_meta(70);
  meta.sync = {"allreduce", {}, {{"residual.rank0", {0.5f, -0.25f}}}};
  const std::string path = mgt::write_checkpoint(ckdir(), meta, *store, &opt, 0);
  make_format_one(path, meta);
  const mgt::CheckpointMeta loaded = mgt::load_checkpoint(path, *store, &opt);
  EXPECT_EQ(loaded.step, 70);
  EXPECT_EQ(loaded.sync.arrays, meta.sync.arrays);
  // Its optimizer checksum was written with the root's: losing it is damage there too.
  delete_attr(path, "/optimizer", "attributes_crc32");
  const std::string msg = error_message<mgt::IoError>([&] { mgt::load_checkpoint(path, *store, &opt); });
  EXPECT_NE(msg.find("group '/optimizer' has no attribute 'attributes_crc32'"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, SyncStateRoundTripsAndIsChecked) {
  auto store = make_store(1.0f);
  TestOptimizer opt;
  opt.setup(store->flat_size());
  mgt::CheckpointMeta meta = make_meta(50);
  meta.sync = {"bf16_ef", {{"updates", {100}}, {"worker_steps", {49, 51}}}, {{"residual.rank0", {0.5f, -0.25f}}}};
  const std::string path = mgt::write_checkpoint(ckdir(), meta, *store, &opt, 0);
  const mgt::CheckpointMeta loaded = mgt::load_checkpoint(path, *store, &opt);
  EXPECT_EQ(loaded.sync.strategy, "bf16_ef");
  EXPECT_EQ(loaded.sync.counters, meta.sync.counters);
  EXPECT_EQ(loaded.sync.arrays, meta.sync.arrays);
  // Without counters, no group: what every lock-step strategy writes.
  const std::string plain = write(60);
  EXPECT_TRUE(mgt::load_checkpoint(plain, *store, &opt).sync.strategy.empty());

  {
    std::lock_guard lock(mgt::data::hdf5_mutex());
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    const hid_t dset = H5Dopen2(file, "/sync/worker_steps", H5P_DEFAULT);
    ASSERT_GE(dset, 0);
    const int64_t changed[2] = {49, 52};
    EXPECT_GE(H5Dwrite(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, changed), 0);
    H5Dclose(dset);
    H5Fclose(file);
  }
  std::string msg = error_message<mgt::IoError>([&] { mgt::load_checkpoint(path, *store, nullptr); });
  EXPECT_NE(msg.find("'/sync/worker_steps' checksum mismatch"), std::string::npos) << msg;
  // Part of the momentum gone: a checkpoint holds the whole state, one dataset per parameter,
  // whichever server had it.
  meta.step = 70;
  const std::string second = mgt::write_checkpoint(ckdir(), meta, *store, &opt, 0);
  {
    std::lock_guard lock(mgt::data::hdf5_mutex());
    const hid_t file = H5Fopen(second.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    EXPECT_GE(H5Ldelete(file, "/optimizer/momentum/fc1.bias", H5P_DEFAULT), 0);
    H5Fclose(file);
  }
  msg = error_message<mgt::DataError>([&] { mgt::load_checkpoint(second, *store, &opt); });
  EXPECT_NE(msg.find("has no 'momentum' optimizer state for parameter 'fc1.bias'"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, OptimizerStateMustMatch) {
  const std::string path = write(13);
  auto store = make_store(0.0f);
  TestOptimizer adam_like({"exp_avg", "exp_avg_sq"});
  adam_like.setup(store->flat_size());
  std::string msg = error_message<mgt::Error>([&] { mgt::load_checkpoint(path, *store, &adam_like); });
  EXPECT_NE(msg.find("/optimizer/exp_avg"), std::string::npos) << msg;

  TestOptimizer stateless(std::vector<std::string>{});
  stateless.setup(store->flat_size());
  msg = error_message<mgt::DataError>([&] { mgt::load_checkpoint(path, *store, &stateless); });
  EXPECT_NE(msg.find("'momentum'"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, KeepTwoLeavesTheNewestTwo) {
  for (int64_t step : {100, 200, 300, 400}) write(step, 2);
  EXPECT_EQ(listing(ckdir()), (std::vector<std::string>{"latest", "step-300.h5", "step-400.h5"}));
  EXPECT_EQ(read_text(fs::path(ckdir()) / "latest"), "step-400.h5\n");
  EXPECT_EQ(mgt::resolve_resume(ckdir(), "latest"), (fs::path(ckdir()) / "step-400.h5").string());
  // Numeric, not lexical, order: step-1000 is newer than step-400.
  write(1000, 2);
  EXPECT_EQ(listing(ckdir()), (std::vector<std::string>{"latest", "step-1000.h5", "step-400.h5"}));
}

TEST_F(CheckpointTest, KeepZeroKeepsAll) {
  for (int64_t step : {1, 2, 3}) write(step, 0);
  EXPECT_EQ(listing(ckdir()), (std::vector<std::string>{"latest", "step-1.h5", "step-2.h5", "step-3.h5"}));
}

TEST_F(CheckpointTest, NoTemporaryFilesAfterWrite) {
  write(1, 3);
  write(2, 3);
  for (const auto& name : listing(ckdir()))
    EXPECT_TRUE(name == "latest" || name.rfind("step-", 0) == 0) << "left behind: " << name;
}

TEST_F(CheckpointTest, ResolveResume) {
  std::string msg = error_message<mgt::IoError>([&] { mgt::resolve_resume(ckdir(), "latest"); });
  EXPECT_NE(msg.find("--resume latest: no checkpoint in '" + ckdir() + "' (no " + ckdir() + "/latest file)"),
            std::string::npos)
      << msg;
  const std::string missing = (dir_ / "nope" / "step-5.h5").string();
  msg = error_message<mgt::IoError>([&] { mgt::resolve_resume(ckdir(), missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;

  const std::string path = write(21);
  EXPECT_EQ(mgt::resolve_resume(ckdir(), path), path);
  EXPECT_EQ(mgt::resolve_resume(ckdir(), "latest"), path);

  // latest names a file that was deleted behind our back.
  fs::remove(path);
  msg = error_message<mgt::IoError>([&] { mgt::resolve_resume(ckdir(), "latest"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST_F(CheckpointTest, ResolveCheckpointTakesARunsLatestOrDirectory) {
  const std::string empty = (dir_ / "empty").string();
  fs::create_directories(empty);
  std::string msg = error_message<mgt::IoError>([&] { mgt::resolve_checkpoint(empty); });
  EXPECT_NE(msg.find("checkpoint '" + empty + "' is a directory with no 'latest' file"), std::string::npos) << msg;
  const std::string path = write(7);
  const std::string latest = (fs::path(ckdir()) / "latest").string();
  EXPECT_EQ(mgt::resolve_checkpoint(path), path);  // a checkpoint file as given
  EXPECT_EQ(mgt::resolve_checkpoint(latest), path);
  EXPECT_EQ(mgt::resolve_checkpoint(ckdir()), path);
  EXPECT_EQ(mgt::resolve_resume(ckdir(), latest), path);
  // Anything else is left to its reader, which says what is wrong with it.
  EXPECT_EQ(mgt::resolve_checkpoint("missing.h5"), "missing.h5");
  fs::remove(path);
  msg = error_message<mgt::IoError>([&] { mgt::resolve_checkpoint(ckdir()); });
  EXPECT_NE(msg.find("'" + latest + "' names 'step-7.h5', but '" + path + "' does not exist"), std::string::npos)
      << msg;
}

TEST_F(CheckpointTest, LoadingMissingOrNonHdf5FileIsIoError) {
  const std::string missing = (dir_ / "step-1.h5").string();
  auto store = make_store(0.0f);
  std::string msg = error_message<mgt::IoError>([&] { mgt::load_checkpoint(missing, *store, nullptr); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  const std::string junk = (dir_ / "junk.h5").string();
  std::ofstream(junk) << "not an HDF5 file\n";
  msg = error_message<mgt::IoError>([&] { mgt::read_checkpoint_meta(junk); });
  EXPECT_NE(msg.find(junk), std::string::npos) << msg;
}

TEST_F(CheckpointTest, UncreatableDirectoryIsIoErrorAndPreviousCheckpointSurvives) {
  const std::string previous = write(10);
  const std::string blocker = (dir_ / "plainfile").string();
  std::ofstream(blocker) << "x";
  auto store = make_store(2.0f);
  TestOptimizer opt;
  opt.setup(store->flat_size());
  const std::string bad_dir = blocker + "/ckpt";
  const std::string msg =
      error_message<mgt::IoError>([&] { mgt::write_checkpoint(bad_dir, make_meta(20), *store, &opt, 1); });
  EXPECT_NE(msg.find(bad_dir), std::string::npos) << msg;
  EXPECT_NE(msg.find("Not a directory"), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(previous));
  EXPECT_EQ(read_text(fs::path(ckdir()) / "latest"), "step-10.h5\n");
}

TEST_F(CheckpointTest, FailedWriteLeavesPreviousCheckpointAndLatest) {
  const std::string previous = write(10);
  // A non-empty directory where step-20.h5 should go makes the final rename fail after the
  // temporary file was fully written.
  fs::create_directories(fs::path(ckdir()) / "step-20.h5" / "occupied");
  auto store = make_store(2.0f);
  TestOptimizer opt;
  opt.setup(store->flat_size());
  const std::string msg =
      error_message<mgt::IoError>([&] { mgt::write_checkpoint(ckdir(), make_meta(20), *store, &opt, 1); });
  EXPECT_NE(msg.find("step-20.h5"), std::string::npos) << msg;
  EXPECT_EQ(read_text(fs::path(ckdir()) / "latest"), "step-10.h5\n");
  EXPECT_EQ(listing(ckdir()), (std::vector<std::string>{"latest", "step-10.h5", "step-20.h5"}))
      << "the temporary file must be removed";
  auto loaded = make_store(-1.0f);
  EXPECT_EQ(mgt::load_checkpoint(previous, *loaded, nullptr).step, 10);
}

TEST_F(CheckpointTest, SameStateGivesByteIdenticalFiles) {
  // Object headers carry no timestamps: two saves of the same state a second apart are equal.
  const std::string first = write(50);
  const std::string copy = (dir_ / "first.h5").string();
  fs::rename(first, copy);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const std::string second = write(50);
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(copy), bytes(second));
}

TEST_F(CheckpointTest, WriteErrorFromTheDiskIsIoErrorAndCleansUp) {
  // A file size limit makes the data write fail with EFBIG, standing in for ENOSPC.
  const std::string previous = write(10);
  mgt::ParameterStore big;
  big.declare("fc1.weight", {512, 1024}, mgt::Init::zeros, 1024);  // 2 MiB
  big.finalize();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limited = old;
  limited.rlim_cur = 256 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string msg;
  try {
    mgt::write_checkpoint(ckdir(), make_meta(20), big, nullptr, 1);
  } catch (const mgt::IoError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(msg.empty()) << "expected IoError";
  EXPECT_NE(msg.find("step-20.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(listing(ckdir()), (std::vector<std::string>{"latest", "step-10.h5"}));
  EXPECT_EQ(read_text(fs::path(ckdir()) / "latest"), "step-10.h5\n");
  auto loaded = make_store(-1.0f);
  EXPECT_EQ(mgt::load_checkpoint(previous, *loaded, nullptr).step, 10);
}

}  // namespace

TEST(CheckpointLeftovers, TemporariesOfAKilledWriteAreRemovedCheckpointsKept) {
  const auto dir = std::filesystem::temp_directory_path() / ("mgt-leftovers-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto touch = [&](const std::string& name) { std::ofstream(dir / name) << "x"; };
  for (const char* name :
       {".step-40.h5.tmp-123", ".latest.tmp-123", "step-20.h5", "latest", "metrics.jsonl", ".hidden-user-file"})
    touch(name);
  // Links with a temporary's name, dangling or not (planted where a write would have followed
  // them): the links go, what they lead to stays.
  touch("kept-target");
  std::filesystem::create_symlink(dir / "kept-target", dir / ".step-50.h5.tmp-124");
  std::filesystem::create_symlink(dir / "missing-target", dir / ".latest.tmp-124");
  {
    // Only under the directory's lock: another job's temporaries look the same.
    const mgt::CheckpointDirLock lock(dir.string());
    EXPECT_EQ(lock.remove_leftover_temporaries(), 4);
  }
  for (const char* removed : {".step-40.h5.tmp-123", ".latest.tmp-123", ".step-50.h5.tmp-124", ".latest.tmp-124"})
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir / removed))) << removed;
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "kept-target"));
  EXPECT_FALSE(std::filesystem::exists(dir / "missing-target"));
  for (const char* kept : {"step-20.h5", "latest", "metrics.jsonl", ".hidden-user-file", ".lock"})
    EXPECT_TRUE(std::filesystem::exists(dir / kept)) << kept;
  const mgt::CheckpointDirLock created((dir / "missing").string());
  EXPECT_EQ(created.remove_leftover_temporaries(), 0);
  std::filesystem::remove_all(dir);
}
