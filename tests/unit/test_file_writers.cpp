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

// A path that is a FIFO, a device or a symbolic link is refused before anything is written: a FIFO
// would hang the writer, a device would be written over (or, renamed over, replaced: as root even
// /dev/null), a link planted by another user could lead anywhere. The link's target is untouched.
TEST(AtomicFile, ALinkAFifoOrADeviceIsRefused) {
  const fs::path dir = scratch_dir("atomic-refused");
  const std::string fifo = (dir / "out.svg").string(), link = (dir / "link.svg").string();
  const std::string victim = (dir / "victim").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::ofstream(victim) << "keep";
  fs::create_symlink(victim, link);
  const auto refusal = [](const std::string& path) {
    try {
      mgt::AtomicFile file(path, "report");
    } catch (const mgt::IoError& e) {
      return std::string(e.what());
    }
    return std::string("written");
  };
  EXPECT_EQ(refusal(fifo), "report '" + fifo + "' is a FIFO, not a regular file (mgtrain writes its outputs to " +
                               "regular files only)");
  EXPECT_EQ(refusal("/dev/null"),
            "report '/dev/null' is a character device, not a regular file (mgtrain writes "
            "its outputs to regular files only)");
  EXPECT_EQ(refusal(link), "report '" + link + "' is a symbolic link to '" + victim +
                               "': mgtrain writes no file through a link (remove it, or name the file it leads to)");
  EXPECT_EQ(read_file(victim), "keep");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 3);
  fs::remove_all(dir);
}

// open_for_writing never follows a final link, not even a dangling one (O_CREAT would create its
// target), and names it; a temporary's name is new to the directory each process.
TEST(OpenForWriting, RefusesALinkDanglingOrNot) {
  const fs::path dir = scratch_dir("open-refused");
  const std::string link = (dir / "metrics.jsonl").string(), victim = (dir / "victim").string();
  fs::create_symlink(victim, link);
  for (const auto how : {mgt::WriteOpen::create_new, mgt::WriteOpen::append, mgt::WriteOpen::lock}) {
    std::string why;
    EXPECT_EQ(mgt::open_for_writing(link, how, why), -1);
    EXPECT_EQ(why, "is a symbolic link to '" + victim +
                       "': mgtrain writes no file through a link (remove it, or name the file it leads to)");
    EXPECT_FALSE(fs::exists(victim));
  }
  // A hard link to another file is written through as well: refused where the file is opened in
  // place (a new file cannot have one).
  const std::string victim_file = (dir / "victim-file").string(), lock = (dir / ".lock").string();
  std::ofstream(victim_file) << "keep";
  fs::create_hard_link(victim_file, lock);
  for (const auto how : {mgt::WriteOpen::append, mgt::WriteOpen::lock}) {
    std::string why;
    EXPECT_EQ(mgt::open_for_writing(lock, how, why), -1);
    EXPECT_EQ(why, "has 2 hard links: mgtrain writes no file that is also another (remove it, or name another file)");
  }
  EXPECT_EQ(read_file(victim_file), "keep");
  const std::string temporary = mgt::AtomicFile::temporary_path((dir / "step-1.h5").string());
  EXPECT_EQ(temporary, mgt::AtomicFile::temporary_path((dir / "step-1.h5").string()));
  EXPECT_NE(temporary.find("/.step-1.h5.tmp-" + std::to_string(::getpid()) + "-"), std::string::npos) << temporary;
  EXPECT_EQ(temporary.size(), (dir / ".step-1.h5.tmp-").string().size() + std::to_string(::getpid()).size() + 17);
  fs::remove_all(dir);
}

// An output that is an input, by another path or a hard link too, is refused.
TEST(OpenForWriting, AnOutputThatIsAnInputIsRefused) {
  const fs::path dir = scratch_dir("output-input");
  const std::string input = (dir / "in.txt").string(), hard = (dir / "hard.txt").string();
  std::ofstream(input) << "text";
  fs::create_hard_link(input, hard);
  EXPECT_NO_THROW(mgt::refuse_output_that_is_input("--out", (dir / "new.h5").string(), {input}));
  for (const std::string& out : {input, hard, (dir / "." / "in.txt").string()}) {
    try {
      mgt::refuse_output_that_is_input("data convert --out", out, {"missing", input});
      ADD_FAILURE() << out << " was not refused";
    } catch (const mgt::IoError& e) {
      EXPECT_EQ(std::string(e.what()), "data convert --out '" + out + "' is the input '" + input +
                                           "' (the same file): writing it would destroy what is read; give "
                                           "another output path");
    }
  }
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
