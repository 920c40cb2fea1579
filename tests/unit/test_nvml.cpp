// NVML loaded at run time: without the driver everything says "unknown" and nothing throws; the
// GPU monitor's thread (driven by a stand-in reading) samples on its interval and stops at once;
// the JSON a metrics record carries per rank.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "io/json_line.hpp"
#include "kernels/cuda/nvml.hpp"
#include "mgtrain/error.hpp"
#include "tools/report.hpp"

using namespace mgt;
using Clock = std::chrono::steady_clock;

namespace {

// The sample as the metrics line writes it.
std::string gpu_json(const GpuSample& sample) { return json_line(gpu_sample_json(sample)); }

bool nvml_library_present() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) dlclose(lib);
  return lib != nullptr;
}

#define SKIP_WITH_NVML() \
  if (nvml_library_present()) GTEST_SKIP() << "libnvidia-ml.so.1 is installed: this checks a machine without it"

#define SKIP_WITHOUT_NVML() \
  if (!nvml_library_present()) GTEST_SKIP() << "libnvidia-ml.so.1 is not installed"

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

GpuSample filled(double util, double used, double total, double temp) {
  GpuSample s;
  s.valid = true;
  s.util_percent = util;
  s.memory_used_mb = used;
  s.memory_total_mb = total;
  s.temperature_c = temp;
  return s;
}

}  // namespace

TEST(Nvml, AbsentLibraryAnswersUnknownWithoutThrowing) {
  SKIP_WITH_NVML();
  Nvml nvml;
  EXPECT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.device_count(), -1);
  EXPECT_EQ(nvml.driver_version(), "");
  Nvml::Memory memory{7, 3};
  EXPECT_FALSE(nvml.memory("00000000:1A:00.0", memory));
  EXPECT_EQ(memory.total, 7);  // untouched
  EXPECT_EQ(memory.used, 3);
  Nvml::Utilization utilization{5, 6};
  EXPECT_FALSE(nvml.utilization("00000000:1A:00.0", utilization));
  EXPECT_EQ(utilization.gpu, 5);
  int celsius = -4;
  EXPECT_FALSE(nvml.temperature("00000000:1A:00.0", celsius));
  EXPECT_EQ(celsius, -4);
  EXPECT_FALSE(read_gpu_sample(nvml, "00000000:1A:00.0").valid);
}

TEST(Nvml, PresentLibraryKnowsNoUnknownPciAddress) {
  SKIP_WITHOUT_NVML();
  Nvml nvml;
  if (!nvml.ok()) GTEST_SKIP() << "libnvidia-ml.so.1 is installed but NVML does not initialise";
  EXPECT_GE(nvml.device_count(), 0);
  EXPECT_NE(nvml.driver_version(), "");
  // Domain ffff does not exist on any machine this runs on.
  Nvml::Memory memory;
  EXPECT_FALSE(nvml.memory("0000FFFF:FF:1F.7", memory));
  EXPECT_FALSE(read_gpu_sample(nvml, "0000FFFF:FF:1F.7").valid);
}

TEST(GpuMonitor, InertWithoutNvml) {
  SKIP_WITH_NVML();
  const auto start = Clock::now();
  {
    GpuMonitor monitor("00000000:1A:00.0", 60.0);
    EXPECT_FALSE(monitor.active());
    EXPECT_FALSE(monitor.latest().valid);
    EXPECT_EQ(gpu_json(monitor.latest()), "null");
  }
  EXPECT_LT(seconds_since(start), 1.0);
}

TEST(GpuMonitor, InertWithoutAGpuAddress) {
  GpuMonitor monitor(std::string(), 1.0);
  EXPECT_FALSE(monitor.active());
  EXPECT_FALSE(monitor.latest().valid);
}

TEST(GpuMonitor, RefusesAnIntervalThatIsNotPositive) {
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(GpuMonitor("00000000:1A:00.0", bad), ConfigError) << bad;
    EXPECT_THROW(GpuMonitor([] { return GpuSample{}; }, bad), ConfigError) << bad;
  }
}

TEST(GpuMonitor, SamplesOnItsIntervalAndKeepsTheLatest) {
  std::atomic<int> reads{0};
  GpuMonitor monitor(
      [&reads] {
        const int n = ++reads;
        return filled(n, 100.0 * n, 1000, 40);
      },
      0.01);
  EXPECT_TRUE(monitor.active());
  // The first sample is there as soon as the constructor returns.
  EXPECT_GE(monitor.latest().util_percent, 1.0);
  EXPECT_TRUE(monitor.latest().valid);
  const auto start = Clock::now();
  while (reads.load() < 5 && seconds_since(start) < 30.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(reads.load(), 5) << "the monitor did not sample every 10 ms";
  const GpuSample s = monitor.latest();
  EXPECT_TRUE(s.valid);
  EXPECT_GE(s.util_percent, 4.0);                       // a later reading replaced the first ones
  EXPECT_EQ(s.memory_used_mb, 100.0 * s.util_percent);  // one reading, not a mix of two
}

TEST(GpuMonitor, StopsAtOnceWhateverTheInterval) {
  std::atomic<int> reads{0};
  auto monitor = std::make_unique<GpuMonitor>(
      [&reads] {
        ++reads;
        return filled(50, 1, 2, 30);
      },
      60.0);
  ASSERT_TRUE(monitor->active());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the thread is now waiting
  const auto start = Clock::now();
  monitor.reset();
  // A thread that slept out its interval would hold the destructor for a minute.
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_EQ(reads.load(), 1);  // only the constructor's sample: stopping does not read again
}

TEST(GpuMonitor, AFailingReadingIsAnInvalidSample) {
  std::atomic<int> reads{0};
  GpuMonitor monitor(
      [&reads]() -> GpuSample {
        if (++reads > 1) throw std::runtime_error("driver went away");
        return filled(1, 2, 3, 4);
      },
      0.01);
  EXPECT_TRUE(monitor.latest().valid);
  const auto start = Clock::now();
  while (reads.load() < 3 && seconds_since(start) < 30.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(reads.load(), 3);
  EXPECT_FALSE(monitor.latest().valid);
}

TEST(GpuSampleJson, InvalidIsNull) {
  EXPECT_EQ(gpu_json(GpuSample{}), "null");
  GpuSample stale = filled(93, 10240.5, 143771, 51);
  stale.valid = false;
  EXPECT_EQ(gpu_json(stale), "null");
}

TEST(GpuSampleJson, FilledSampleIsOneObject) {
  const std::string text = gpu_json(filled(93, 10240.5, 143771, 51));
  EXPECT_EQ(text, R"({"util":93,"mem_used_mb":10240.5,"mem_total_mb":143771,"temp_c":51})");
  const JsonLine line = parse_json_line(text, "gpu", 1);
  EXPECT_EQ(line.numbers.size(), 4u);
  EXPECT_EQ(line.numbers.at("util"), 93);
  EXPECT_EQ(line.numbers.at("mem_used_mb"), 10240.5);
  EXPECT_EQ(line.numbers.at("mem_total_mb"), 143771);
  EXPECT_EQ(line.numbers.at("temp_c"), 51);
}

TEST(GpuSampleJson, FiguresHaveOneDecimalAndUnknownOnesAreNull) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(gpu_json(filled(0, 0.04, 81920.96, 0)), R"({"util":0,"mem_used_mb":0,"mem_total_mb":81921,"temp_c":0})");
  EXPECT_EQ(gpu_json(filled(nan, 512.26, 1024, nan)),
            R"({"util":null,"mem_used_mb":512.3,"mem_total_mb":1024,"temp_c":null})");
}
