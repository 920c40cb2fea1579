// The JSON lines mgtrain writes: valid JSON whatever a path holds, non-finite figures as null,
// keys in the order the shell tests read them, numbers with the digits printf gave them, and
// `mgtrain report`'s reader taking them back.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/json_line.hpp"
#include "runtime/evaluate.hpp"
#include "runtime/result_json.hpp"
#include "runtime/trainer.hpp"
#include "tools/bench.hpp"
#include "tools/report.hpp"

using namespace mgt;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string text(const JsonValue& value) { return json_line(value); }

// The keys of a JSON object line, in the order written.
std::vector<std::string> keys(const std::string& line) {
  const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(line);
  std::vector<std::string> out;
  for (const auto& item : parsed.items()) out.push_back(item.key());
  return out;
}

}  // namespace

TEST(JsonNumbers, SameDigitsAsPrintf) {
  EXPECT_EQ(text(json_significant(2.302585092994046, 9)), "2.30258509");  // %.9g
  EXPECT_EQ(text(json_significant(0.1, 9)), "0.1");
  EXPECT_EQ(text(json_significant(1.2e-5, 9)), "1.2e-05");
  EXPECT_EQ(text(json_significant(18000.0, 9)), "18000");  // whole: no ".0", as %g
  EXPECT_EQ(text(json_significant(-0.0, 9)), "0");
  EXPECT_EQ(text(json_fixed(12.3456789, 6)), "12.345679");  // %.6f, less trailing zeros
  EXPECT_EQ(text(json_fixed(0.5, 6)), "0.5");
  EXPECT_EQ(text(json_fixed(-1, 6)), "-1");
  EXPECT_EQ(text(json_fixed(5184.0412, 3)), "5184.041");
  EXPECT_EQ(text(json_fixed(1e300, 4)), "1e+300");
}

TEST(JsonNumbers, NonFiniteIsNull) {
  for (double v : {kNan, kInf, -kInf}) {
    EXPECT_EQ(text(json_significant(v, 9)), "null");
    EXPECT_EQ(text(json_fixed(v, 4)), "null");
  }
}

TEST(JsonLine, TrainResultKeepsKeysOrderAndFormat) {
  TrainResult r;
  r.steps = 100;
  r.steps_run = 60;
  r.samples = 6400;
  r.train_seconds = 1.2345678;
  r.samples_per_s = 5184.0412;
  r.final_loss = 0.12345678912;
  r.checkpoint = "runs/x/step-100.h5";
  r.peak_rss_mb = 123.45;
  r.phases.compute = 0.0015;
  r.phases.sync = 0.00025;
  r.phases.optimizer = 0.000125;
  r.lost_ranks = {1, 3};
  EXPECT_EQ(train_result_json(r, 2),
            R"({"steps":100,"steps_run":60,"samples":6400,"train_seconds":1.234568,"samples_per_s":5184.041,)"
            R"("final_loss":0.123456789,"checkpoint":"runs/x/step-100.h5","world_size":2,"peak_rss_mb":123.5,)"
            R"("compute_ms":1.5,"sync_ms":0.25,"data_wait_ms":0,"optimizer_ms":0.125,"test_accuracy":-1,)"
            R"("skipped_steps":0,"lost_ranks":[1,3],"device":"cpu"})");
}

// A checkpoint directory may hold any byte but '/' and NUL: the line must stay one JSON object.
TEST(JsonLine, TrainResultWithAQuoteABackslashAndANanLossParses) {
  TrainResult r;
  r.checkpoint = "runs/say \"hi\"\\back\tslash/step-7.h5";
  r.final_loss = kNan;
  const std::string line = train_result_json(r, 1);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed.at("checkpoint").get<std::string>(), r.checkpoint);
  EXPECT_TRUE(parsed.at("final_loss").is_null());
  EXPECT_NE(line.find(R"("final_loss":null,)"), std::string::npos);
  EXPECT_NE(line.find(R"("checkpoint":"runs/say \"hi\"\\back\tslash/step-7.h5")"), std::string::npos) << line;
  // mgtrain report's reader takes it too, null as NaN.
  const JsonLine read = parse_json_line(line, "result", 1);
  EXPECT_TRUE(std::isnan(read.numbers.at("final_loss")));
  EXPECT_EQ(read.numbers.at("steps"), 0);
}

TEST(JsonLine, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  TrainResult r;
  r.checkpoint = "runs/\xff\xfe/step-1.h5";
  const nlohmann::json parsed = nlohmann::json::parse(train_result_json(r, 1));
  EXPECT_EQ(parsed.at("checkpoint").get<std::string>(), "runs/\xEF\xBF\xBD\xEF\xBF\xBD/step-1.h5");
}

TEST(JsonLine, BenchAndEvalResults) {
  BenchResult b;
  b.run.samples_per_s = 1000.5;
  b.samples_per_s_np1 = 600;
  b.scaling_efficiency = 0.83376;
  b.scaling_runs = {0.8, 0.83375, kNan};
  b.gradient_bytes = 407080;
  const std::string bench = bench_result_json(b, 2, 20, 3);
  EXPECT_EQ(keys(bench), (std::vector<std::string>{"world_size",
                                                   "steps",
                                                   "samples_per_s",
                                                   "samples_per_s_np1",
                                                   "scaling_efficiency",
                                                   "compute_ms",
                                                   "sync_ms",
                                                   "data_wait_ms",
                                                   "optimizer_ms",
                                                   "gradient_bytes",
                                                   "allreduce_ms",
                                                   "mpi_allreduce_ms",
                                                   "allreduce_busbw_gbs",
                                                   "mpi_busbw_gbs",
                                                   "flat_busbw_gbs",
                                                   "hierarchical_busbw_gbs",
                                                   "shared_memory_busbw_gbs",
                                                   "peak_rss_mb",
                                                   "repeats",
                                                   "scaling_efficiency_runs",
                                                   "device"}));
  EXPECT_NE(bench.find(R"("samples_per_s":1000.5,"samples_per_s_np1":600,"scaling_efficiency":0.8338,)"),
            std::string::npos)
      << bench;
  EXPECT_NE(bench.find(R"("repeats":3,"scaling_efficiency_runs":[0.8,0.83375,null],"device":"cpu"})"),
            std::string::npos)
      << bench;

  EvalResult e;
  e.accuracy = 0.8123;
  e.loss = 0.51234567;
  e.samples = 10000;
  EXPECT_EQ(eval_result_json(e), R"({"accuracy":0.8123,"loss":0.512346,"samples":10000})");
}
