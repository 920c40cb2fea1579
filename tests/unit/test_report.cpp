// `mgtrain report`: reading JSON lines, the errors, and the SVG (well-formed, one polyline per
// series with one point per metrics line).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "mgtrain/error.hpp"
#include "tools/report.hpp"

using namespace mgt;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("mgtrain-report-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A minimal XML well-formedness check: declaration, comments, elements that nest and close in
// order, quoted attributes, entities in text and values, exactly one root. Returns "" when fine.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> stack;
  int roots = 0;
  std::size_t i = 0;
  auto entity_ok = [&](std::size_t at) {
    static const std::regex kEntity("&(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);");
    const std::string rest = s.substr(at, 12);
    return std::regex_search(rest, kEntity, std::regex_constants::match_continuous);
  };
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
  };
  while (i < s.size()) {
    if (s[i] != '<') {
      if (s[i] == '&' && !entity_ok(i)) return "bad entity at " + std::to_string(i);
      if (stack.empty() && !std::isspace(static_cast<unsigned char>(s[i])))
        return "text outside the root at " + std::to_string(i);
      ++i;
      continue;
    }
    if (s.compare(i, 5, "<?xml") == 0) {
      if (i != 0) return "declaration not at the start";
      const auto end = s.find("?>", i);
      if (end == std::string::npos) return "unterminated declaration";
      i = end + 2;
    } else if (s.compare(i, 4, "<!--") == 0) {
      const auto end = s.find("-->", i);
      if (end == std::string::npos) return "unterminated comment";
      i = end + 3;
    } else if (s.compare(i, 2, "</") == 0) {
      std::size_t j = i + 2;
      while (j < s.size() && name_char(s[j])) ++j;
      const std::string name = s.substr(i + 2, j - i - 2);
      if (j >= s.size() || s[j] != '>') return "bad end tag " + name;
      if (stack.empty() || stack.back() != name) return "end tag </" + name + "> does not match";
      stack.pop_back();
      i = j + 1;
    } else {
      std::size_t j = i + 1;
      while (j < s.size() && name_char(s[j])) ++j;
      const std::string name = s.substr(i + 1, j - i - 1);
      if (name.empty()) return "empty tag name at " + std::to_string(i);
      if (stack.empty() && ++roots > 1) return "second root element <" + name + ">";
      std::set<std::string> attrs;
      for (;;) {
        while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
        if (j >= s.size()) return "unterminated tag <" + name + ">";
        if (s[j] == '>') {
          stack.push_back(name);
          ++j;
          break;
        }
        if (s.compare(j, 2, "/>") == 0) {
          j += 2;
          break;
        }
        const std::size_t a = j;
        while (j < s.size() && name_char(s[j])) ++j;
        const std::string attr = s.substr(a, j - a);
        if (attr.empty() || j >= s.size() || s[j] != '=') return "bad attribute in <" + name + ">";
        if (!attrs.insert(attr).second) return "duplicate attribute " + attr + " in <" + name + ">";
        ++j;
        if (j >= s.size() || (s[j] != '"' && s[j] != '\'')) return "unquoted attribute " + attr;
        const char q = s[j++];
        while (j < s.size() && s[j] != q) {
          if (s[j] == '<') return "'<' in attribute " + attr;
          if (s[j] == '&' && !entity_ok(j)) return "bad entity in attribute " + attr;
          ++j;
        }
        if (j >= s.size()) return "unterminated attribute " + attr;
        ++j;
      }
      i = j;
    }
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (roots != 1) return "no root element";
  return "";
}

// data-series name -> point count of each of its polylines, in order.
std::map<std::string, std::vector<std::size_t>> polylines(const std::string& svg) {
  std::map<std::string, std::vector<std::size_t>> out;
  static const std::regex kLine("<polyline data-series=\"([^\"]*)\"[^>]*points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kLine); it != std::sregex_iterator(); ++it) {
    std::istringstream points((*it)[2].str());
    std::size_t n = 0;
    for (std::string p; points >> p;) {
      EXPECT_NE(p.find(','), std::string::npos) << p;
      ++n;
    }
    out[(*it)[1].str()].push_back(n);
  }
  return out;
}

std::string metrics_line(int step, double loss, double acc, double ms0, double ms1) {
  std::ostringstream o;
  o << "{\"step\":" << step << ",\"epoch\":1,\"loss\":" << loss << ",\"accuracy\":" << acc
    << ",\"samples_per_s\":" << 18000 + step << ",\"data_wait_share\":1.2e-05,\"lr\":" << 0.02 - step * 1e-5
    << ",\"time_s\":" << step * 0.007 << ",\"rank_step_ms\":[" << ms0 << "," << ms1 << "]}\n";
  return o.str();
}

template <typename E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "";
}

}  // namespace

TEST(ReportXmlCheck, CatchesBrokenDocuments) {
  EXPECT_EQ(xml_problem("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/><c>t &amp; u</c></a>\n"), "");
  EXPECT_NE(xml_problem("<a><b></a></b>"), "");
  EXPECT_NE(xml_problem("<a x=1/>"), "");
  EXPECT_NE(xml_problem("<a>&</a>"), "");
  EXPECT_NE(xml_problem("<a/><b/>"), "");
  EXPECT_NE(xml_problem("<a>"), "");
}

TEST(ReportParse, FlatObjectsWithNumbersAndArrays) {
  const JsonLine l = parse_json_line(
      " {\"step\":200, \"loss\":0.46, \"x\":-1.5e-3,\"r\":[2.03, null, 6.45 ],\"e\":[],\"s\":\"a\\\"b\","
      "\"t\":true,\"n\":null} ",
      "m.jsonl", 1);
  EXPECT_DOUBLE_EQ(l.numbers.at("step"), 200);
  EXPECT_DOUBLE_EQ(l.numbers.at("loss"), 0.46);
  EXPECT_DOUBLE_EQ(l.numbers.at("x"), -1.5e-3);
  ASSERT_EQ(l.arrays.at("r").size(), 3u);
  EXPECT_DOUBLE_EQ(l.arrays.at("r")[0], 2.03);
  EXPECT_TRUE(std::isnan(l.arrays.at("r")[1]));
  EXPECT_DOUBLE_EQ(l.arrays.at("r")[2], 6.45);
  EXPECT_TRUE(l.arrays.at("e").empty());
  EXPECT_TRUE(std::isnan(l.numbers.at("n")));  // null: a figure that was not finite
  EXPECT_EQ(l.numbers.count("s") + l.numbers.count("t"), 0u);
  EXPECT_TRUE(parse_json_line("{}", "m.jsonl", 1).numbers.empty());
}

// A GPU run's metrics carry one object per rank (NVML's figures), or null where a rank had none.
TEST(ReportParse, ArraysOfPerRankObjectsBecomeOneArrayPerField) {
  const JsonLine l = parse_json_line(
      "{\"step\":50,\"gpu\":[{\"util\":93,\"temp_c\":51},null,{\"util\":40.5,\"temp_c\":null}]}", "m.jsonl", 1);
  const auto& util = l.arrays.at("gpu.util");
  ASSERT_EQ(util.size(), 3u);
  EXPECT_DOUBLE_EQ(util[0], 93);
  EXPECT_TRUE(std::isnan(util[1]));
  EXPECT_DOUBLE_EQ(util[2], 40.5);
  const auto& temp = l.arrays.at("gpu.temp_c");
  ASSERT_EQ(temp.size(), 3u);
  EXPECT_DOUBLE_EQ(temp[0], 51);
  EXPECT_TRUE(std::isnan(temp[2]));
  EXPECT_EQ(l.arrays.at("gpu").size(), 3u);
}

TEST(ReportParse, MalformedLinesNameFileLineAndExpectation) {
  const auto err = [](const std::string& text) {
    return error_of<DataError>([&] { parse_json_line(text, "run/metrics.jsonl", 7); });
  };
  EXPECT_EQ(err("{\"step\":200,\"loss\":0.4"),
            "run/metrics.jsonl:7: expected one JSON object, found invalid JSON at column 23: "
            "syntax error while parsing object - unexpected end of input; expected '}'");
  EXPECT_EQ(err("[1,2]"), "run/metrics.jsonl:7: expected a JSON object, found array");
  EXPECT_NE(err("{\"a\":{\"b\":1}}").find("expected a number or an array of numbers for \"a\""), std::string::npos);
  EXPECT_NE(err("{\"a\":[1,\"x\"]}").find("expected a number, null or an object in the array \"a\""),
            std::string::npos);
  EXPECT_NE(err("{\"gpu\":[{\"util\":\"x\"}]}").find("expected a number or null for \"gpu.util\""), std::string::npos);
  EXPECT_NE(err("{\"a\":1} x").find("expected end of input"), std::string::npos);
  EXPECT_NE(err("{a:1}").find("expected string literal"), std::string::npos);
  EXPECT_NE(err("{\"a\":1.2.3}").find("run/metrics.jsonl:7:"), std::string::npos);
  // Not JSON, though C++ streams print NaN so: mgtrain writes null instead.
  EXPECT_NE(err("{\"step\":10,\"loss\":nan}").find("run/metrics.jsonl:7: expected one JSON object, found"),
            std::string::npos);
  EXPECT_NE(err("{\"a\":1e999}").find("run/metrics.jsonl:7: expected one JSON object"), std::string::npos);
}

TEST(ReportSvg, EveryPanelWithOnePolylinePerSeries) {
  TempDir dir;
  std::string metrics;
  for (int step = 10; step <= 50; step += 10)
    metrics += metrics_line(step, 1.0 / step, 0.5 + step / 200.0, 2 + step / 100.0, 6.5);
  dir.write("metrics.jsonl", metrics);
  dir.write("metrics.rank2.jsonl",
            "{\"server_rank\":2,\"updates\":100,\"staleness_min\":0,\"staleness_mean\":0.54,\"staleness_max\":2}\n"
            "{\"server_rank\":2,\"updates\":200,\"staleness_min\":0,\"staleness_mean\":0.61,\"staleness_max\":3}\n"
            "{\"server_rank\":2,\"updates\":300,\"staleness_min\":0,\"staleness_mean\":0.58,\"staleness_max\":2}\n");
  dir.write("metrics.rank3.jsonl", "");  // a server that has not logged yet: no lines, no error

  const ReportResult r = write_report(dir.path().string(), "");
  EXPECT_EQ(r.path, (dir.path() / "report.svg").string());
  EXPECT_EQ(r.points, 5u);
  const std::string svg = read(r.path);
  EXPECT_EQ(xml_problem(svg), "");
  for (const char* title : {"Loss", "Accuracy", "Throughput (samples/s)", "Step time per rank (ms)", "Learning rate",
                            "Parameter-server staleness"})
    EXPECT_NE(svg.find(std::string("class=\"title\">") + title), std::string::npos) << title;
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("@import"), std::string::npos);
  EXPECT_EQ(svg.find("no data"), std::string::npos);

  using Counts = std::vector<std::size_t>;
  const auto lines = polylines(svg);
  EXPECT_EQ(lines.size(), 8u);
  for (const char* name : {"loss", "accuracy", "samples/s", "rank 0", "rank 1", "lr"})
    EXPECT_EQ(lines.count(name) ? lines.at(name) : Counts{}, Counts{5}) << name;
  EXPECT_EQ(lines.count("server 2 mean") ? lines.at("server 2 mean") : Counts{}, Counts{3});
  EXPECT_EQ(lines.count("server 2 max") ? lines.at("server 2 max") : Counts{}, Counts{3});
  EXPECT_EQ(lines.count("server 3 mean"), 0u);
  // A legend for the two ranks.
  EXPECT_NE(svg.find("class=\"legendtext\">rank 0<"), std::string::npos);
  EXPECT_NE(svg.find("class=\"legendtext\">rank 1<"), std::string::npos);
  // Points lie inside the 900-wide picture.
  EXPECT_NE(svg.find("width=\"900\""), std::string::npos);
}

// Test-file evaluations after epochs (records with test_ fields) between the intervals: the loss
// line stays whole, and the accuracy panel gets a test series.
TEST(ReportSvg, EvaluationRecordsAreTheirOwnSeries) {
  TempDir dir;
  std::string metrics;
  for (int step = 10; step <= 40; step += 10) {
    metrics += metrics_line(step, 1.0 / step, 0.5 + step / 200.0, 2, 3);
    if (step % 20 == 0)
      metrics += "{\"step\":" + std::to_string(step) +
                 ",\"epoch\":1,\"test_accuracy\":0.7,\"test_loss\":0.8,\"test_samples\":100}\n";
  }
  dir.write("metrics.jsonl", metrics);
  const ReportResult r = write_report(dir.path().string(), "");
  const std::string svg = read(r.path);
  EXPECT_EQ(xml_problem(svg), "");
  using Counts = std::vector<std::size_t>;
  const auto lines = polylines(svg);
  EXPECT_EQ(lines.count("loss") ? lines.at("loss") : Counts{}, Counts{4});
  EXPECT_EQ(lines.count("test") ? lines.at("test") : Counts{}, Counts{2});
  EXPECT_NE(svg.find("class=\"legendtext\">test<"), std::string::npos);
  EXPECT_NE(svg.find("final loss 0.025"), std::string::npos) << "the summary is not the last interval's";
}

TEST(ReportSvg, ResumedRunsAndMissingFields) {
  TempDir dir;
  // An older run without accuracy or per-rank times, then a resume from step 20 that logs them.
  dir.write("metrics.jsonl",
            "{\"step\":10,\"epoch\":1,\"loss\":0.9,\"samples_per_s\":100,\"lr\":0.1,\"time_s\":1}\n"
            "{\"step\":20,\"epoch\":1,\"loss\":0.8,\"samples_per_s\":110,\"lr\":0.1,\"time_s\":2}\n"
            "{\"step\":30,\"epoch\":1,\"loss\":0.7,\"samples_per_s\":120,\"lr\":0.1,\"time_s\":3}\n"
            "\n" +
                metrics_line(30, 0.7, 0.7, 3, 4) + metrics_line(40, 0.6, 0.75, 3, 4));
  const fs::path out = dir.path() / "pic.svg";
  const ReportResult r = write_report(dir.path().string(), out.string());
  EXPECT_EQ(r.path, out.string());
  EXPECT_EQ(r.points, 5u);
  const std::string svg = read(out);
  EXPECT_EQ(xml_problem(svg), "");
  const auto lines = polylines(svg);
  using Counts = std::vector<std::size_t>;
  EXPECT_EQ(lines.at("loss"), (Counts{3, 2}));  // the resume goes back to step 30: a new line
  EXPECT_EQ(lines.at("accuracy"), (Counts{2}));
  EXPECT_EQ(lines.at("rank 1"), (Counts{2}));
  EXPECT_EQ(lines.count("server 2 mean"), 0u);
  EXPECT_EQ(svg.find("staleness"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "report.svg"));
}

TEST(ReportSvg, SinglePointAndConstantSeriesStillDraw) {
  TempDir dir;
  dir.write("metrics.jsonl", metrics_line(100, 0.5, 0.8, 2, 2));
  const std::string svg = read(write_report(dir.path().string(), "").path);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polylines(svg).at("loss"), std::vector<std::size_t>{1});
  EXPECT_NE(svg.find("<circle"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(ReportErrors, NameTheFileAndLine) {
  TempDir dir;
  const std::string file = (dir.path() / "metrics.jsonl").string();
  const std::string run = dir.path().string();

  EXPECT_NE(error_of<IoError>([&] { write_report(run, ""); }).find("metrics file '" + file + "' does not exist"),
            std::string::npos);
  EXPECT_NE(error_of<IoError>([&] { write_report(run + "/nope", ""); }).find("does not exist"), std::string::npos);

  dir.write("metrics.jsonl", "\n  \n");
  EXPECT_NE(error_of<DataError>([&] { write_report(run, ""); }).find("metrics file '" + file + "' is empty"),
            std::string::npos);

  dir.write("metrics.jsonl", metrics_line(10, 1, 0.5, 1, 1) + "{\"step\":20,\"loss\":0.4\n");
  const std::string broken = error_of<DataError>([&] { write_report(run, ""); });
  EXPECT_EQ(broken.rfind(file + ":2: expected ", 0), 0u) << broken;
  EXPECT_EQ(broken.find('\n'), std::string::npos);

  dir.write("metrics.jsonl", metrics_line(10, 1, 0.5, 1, 1) + metrics_line(20, 1, 0.5, 1, 1) + "{\"loss\":0.4}\n");
  EXPECT_EQ(error_of<DataError>([&] { write_report(run, ""); }),
            file + ":3: expected a numeric field \"step\" in every line, found none");

  dir.write("metrics.jsonl", metrics_line(10, 1, 0.5, 1, 1));
  dir.write("metrics.rank2.jsonl", "{\"server_rank\":2,\"updates\":100,\"staleness_mean\":0.5}\n{\"server_rank\":2\n");
  EXPECT_EQ(error_of<DataError>([&] {
              write_report(run, "");
            }).rfind((dir.path() / "metrics.rank2.jsonl").string() + ":2: expected", 0),
            0u);
  fs::remove(dir.path() / "metrics.rank2.jsonl");

  EXPECT_NE(error_of<IoError>([&] { write_report(run, run + "/no/such/dir/x.svg"); }).find("cannot open"),
            std::string::npos);
}
