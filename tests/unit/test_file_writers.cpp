// The files `mgtrain export` and `eval --logits` write: whole under their name or not at all
// (AtomicFile), and NumPy's .npy header and values.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/atomic_file.hpp"
#include "io/npy.hpp"
#include "mgtrain/error.hpp"

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mgtrain-onnx-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(AtomicFile, AppearsWholeOrNotAtAll) {
  const fs::path dir = scratch_dir("atomic");
  const std::string path = (dir / "m.onnx").string();
  {
    mgt::AtomicFile file(path, "ONNX file");
    EXPECT_FALSE(fs::exists(path));
    file.commit("bytes");
  }
  EXPECT_EQ(read_file(path), "bytes");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  {
    mgt::AtomicFile file(path, "ONNX file");  // abandoned: the old file stays, no temporary is left
  }
  EXPECT_EQ(read_file(path), "bytes");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  try {
    mgt::AtomicFile file((dir / "missing" / "m.onnx").string(), "ONNX file");
    FAIL() << "created a file in a missing directory";
  } catch (const mgt::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("ONNX file '" + (dir / "missing" / "m.onnx").string() +
                                         "' cannot be written: cannot create a file in directory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(mgt::AtomicFile(dir.string(), "ONNX file"), mgt::IoError);  // a directory
  fs::remove_all(dir);
}

// A file written in parts (the timeline trace, as rank 0 receives each rank's) appears whole at
// the commit, its parts in order, and not before.
TEST(AtomicFile, PartsAppearTogetherAtTheCommit) {
  const fs::path dir = scratch_dir("atomic-parts");
  const std::string path = (dir / "trace.json").string();
  {
    mgt::AtomicFile file(path, "the trace");
    file.append("{\"a\":");
    file.append("[1,");
    EXPECT_FALSE(fs::exists(path));
    file.commit("2]}");
  }
  EXPECT_EQ(read_file(path), "{\"a\":[1,2]}");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  {
    mgt::AtomicFile file(path, "the trace");
    file.append("half");  // abandoned after a part: the old file stays whole
  }
  EXPECT_EQ(read_file(path), "{\"a\":[1,2]}");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

// A path that is a pipe or a device (/dev/stdout, /dev/null) is written in place: renaming a
// temporary over it would replace the device itself, as root even /dev/null.
TEST(AtomicFile, APipeIsWrittenInPlaceNotReplaced) {
  const fs::path dir = scratch_dir("atomic-pipe");
  const std::string path = (dir / "out.svg").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  // Opened for reading first, so that the writer's open does not wait for a reader.
  const int reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0) << std::strerror(errno);
  {
    mgt::AtomicFile file(path, [](mgt::AtomicFile::Step, int error) { return std::string(std::strerror(error)); });
    EXPECT_EQ(file.temporary(), path);
    file.create();
    file.commit("<svg/>");
  }
  char buf[16] = {};
  EXPECT_EQ(::read(reader, buf, sizeof buf), 6);
  EXPECT_STREQ(buf, "<svg/>");
  ::close(reader);
  EXPECT_TRUE(fs::is_fifo(path));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(Npy, HeaderAndValues) {
  const std::vector<float> v{1.0f, -2.5f, 3.0f, 4.0f, 5.0f, 6.0f};
  const std::string npy = mgt::npy_float32(v.data(), {2, 3});
  ASSERT_GT(npy.size(), 10u);
  EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header = static_cast<unsigned char>(npy[8]) | static_cast<unsigned char>(npy[9]) << 8;
  EXPECT_EQ((10 + header) % 64, 0u);
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(npy.substr(10, dict.size()), dict);
  EXPECT_EQ(npy[10 + header - 1], '\n');
  ASSERT_EQ(npy.size(), 10 + header + v.size() * sizeof(float));
  std::vector<float> back(v.size());
  std::memcpy(back.data(), npy.data() + 10 + header, npy.size() - 10 - header);
  EXPECT_EQ(back, v);
  EXPECT_NE(mgt::npy_float32(v.data(), {6}).find("'shape': (6,), }"), std::string::npos);
}

}  // namespace
