// `mgtrain report`: metrics.jsonl -> one self-contained SVG (no fonts, scripts or links outside).
#include "tools/report.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.hpp"
#include "datasets/regular_file.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

// ---------------------------------------------------------------------------------------------
// Reading the metrics lines: nlohmann/json parses, this keeps the numbers.

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& file, std::size_t line_no, const std::string& expected) {
  throw DataError(file + ":" + std::to_string(line_no) + ": expected " + expected);
}

// A number, or NaN for null: how mgtrain writes a figure that is not finite.
bool to_number(const json& value, double& out) {
  if (value.is_number()) {
    out = value.get<double>();
    return true;
  }
  if (value.is_null()) {
    out = NAN;
    return true;
  }
  return false;
}

// The parser's own words after its "parse error at line 1, column N: " prefix.
std::string syntax_error(const json::parse_error& e) {
  const std::string what = e.what();
  const std::size_t at = what.find(": ", what.find("column "));
  return "invalid JSON at column " + std::to_string(e.byte) + ": " +
         (at == std::string::npos ? what : what.substr(at + 2));
}

}  // namespace

JsonLine parse_json_line(const std::string& text, const std::string& file, std::size_t line_no) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(file, line_no, "one JSON object, found " + syntax_error(e));
  } catch (const json::exception& e) {  // a number beyond double's range (out_of_range.406)
    fail(file, line_no, "one JSON object, found " + std::string(e.what()));
  }
  if (!doc.is_object()) fail(file, line_no, "a JSON object, found " + std::string(doc.type_name()));
  JsonLine out;
  for (const auto& [key, value] : doc.items()) {
    double number = 0;
    if (value.is_array()) {
      std::vector<double> values;
      for (std::size_t index = 0; index < value.size(); ++index) {
        const json& element = value[index];
        if (element.is_object()) {
          // Per-rank objects ("gpu":[{"util":93,...}, null]): field f becomes array "gpu.f", NaN-padded.
          for (const auto& [field, v] : element.items()) {
            if (!to_number(v, number)) fail(file, line_no, "a number or null for \"" + key + "." + field + "\"");
            std::vector<double>& column = out.arrays[key + "." + field];
            column.resize(index, NAN);
            column.push_back(number);
          }
          values.push_back(NAN);
        } else if (to_number(element, number)) {
          values.push_back(number);
        } else {
          fail(file, line_no, "a number, null or an object in the array \"" + key + "\"");
        }
      }
      out.arrays[key] = std::move(values);
    } else if (value.is_object()) {
      fail(file, line_no, "a number or an array of numbers for \"" + key + "\"");
    } else if (to_number(value, number)) {
      out.numbers[key] = number;
    }  // strings and booleans carry nothing to plot
  }
  return out;
}

std::vector<JsonLine> read_json_lines(const std::string& path, const std::string& required, bool allow_empty) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string why = data::unreachable_path(path);
    throw IoError("metrics file '" + path + "' " +
                  (why.empty() ? std::string("cannot be read: ") + std::strerror(error) : why) +
                  " (expected one JSON object per line, as mgtrain train writes)");
  }
  std::vector<JsonLine> lines;
  std::string text;
  std::size_t line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    JsonLine line = parse_json_line(text, path, line_no);
    const auto it = line.numbers.find(required);
    if (it == line.numbers.end() || !std::isfinite(it->second)) {
      const char* found = line.arrays.count(required) ? "an array" : it == line.numbers.end() ? "none" : "null";
      throw DataError(path + ":" + std::to_string(line_no) + ": expected a numeric field \"" + required +
                      "\" in every line, found " + found);
    }
    lines.push_back(std::move(line));
  }
  if (lines.empty() && !allow_empty) {
    throw DataError("metrics file '" + path +
                    "' is empty (expected one JSON object per line, written every "
                    "train.log_every steps)");
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// Drawing.

namespace {

const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr std::size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

struct Point {
  double x, y;
};

struct Series {
  std::string name;
  std::string color;
  bool dashed = false;
  std::vector<std::vector<Point>> segments;  // a new segment where x goes back (a resume) or a gap
  bool empty() const { return segments.empty(); }
};

struct Panel {
  std::string title;
  std::string x_label;
  bool from_zero = false;
  std::vector<Series> series;
};

// Builds a series from `lines`: x from x_key, y from get(line) (NaN where the line has none).
template <typename Get>
Series make_series(const std::vector<JsonLine>& lines, const std::string& x_key, Get get, std::string name,
                   std::string color, bool dashed = false) {
  Series s{std::move(name), std::move(color), dashed, {}};
  bool open = false;
  double last_x = 0;
  for (const JsonLine& line : lines) {
    const double x = line.numbers.at(x_key);
    const double y = get(line);
    if (!std::isfinite(y)) {
      open = false;
      continue;
    }
    if (!open || x <= last_x) s.segments.emplace_back();
    s.segments.back().push_back({x, y});
    open = true;
    last_x = x;
  }
  return s;
}

double field(const JsonLine& line, const char* key) {
  const auto it = line.numbers.find(key);
  return it == line.numbers.end() ? std::nan("") : it->second;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t')
          out += ' ';
        else
          out += c;
    }
  }
  return out;
}

std::string fmt(const char* format, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, a);
  return buf;
}

// Round tick positions (1, 2 or 5 times a power of ten) covering [lo, hi], with lo and hi widened
// to the outer ticks.
struct Axis {
  double lo, hi, step;
  std::vector<double> ticks;
};

Axis nice_axis(double lo, double hi, int target) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  Axis axis{std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, step, {}};
  for (double t = axis.lo; t <= axis.hi + step * 1e-6; t += step) {
    axis.ticks.push_back(std::fabs(t) < step * 1e-6 ? 0.0 : t);
  }
  return axis;
}

std::string tick_label(double v, const Axis& axis) {
  const double a = std::max(std::fabs(axis.lo), std::fabs(axis.hi));
  if (v == 0) return "0";
  if (a < 1e-3) return fmt("%.2g", v);
  double scale = 1;
  std::string suffix;
  if (a >= 1e6) {
    scale = 1e6;
    suffix = "M";
  } else if (a >= 1e4) {
    scale = 1e3;
    suffix = "k";
  }
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(axis.step / scale) - 1e-9)), 0, 8);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v / scale);
  return buf + suffix;
}

constexpr double kWidth = 900, kPanelW = 450, kPanelH = 300, kHeader = 64;
constexpr double kLeft = 62, kRight = 18, kTop = 36, kBottom = 44;

void draw_panel(std::ostringstream& svg, const Panel& panel, double ox, double oy) {
  const double px0 = ox + kLeft, px1 = ox + kPanelW - kRight, py0 = oy + kTop, py1 = oy + kPanelH - kBottom;
  svg << "<g>\n<text x=\"" << px0 << "\" y=\"" << oy + 22 << "\" class=\"title\">" << xml_escape(panel.title)
      << "</text>\n";
  double xmin = HUGE_VAL, xmax = -HUGE_VAL, ymin = HUGE_VAL, ymax = -HUGE_VAL;
  for (const Series& s : panel.series)
    for (const auto& seg : s.segments)
      for (const Point& p : seg) {
        xmin = std::min(xmin, p.x);
        xmax = std::max(xmax, p.x);
        ymin = std::min(ymin, p.y);
        ymax = std::max(ymax, p.y);
      }
  svg << "<rect x=\"" << px0 << "\" y=\"" << py0 << "\" width=\"" << px1 - px0 << "\" height=\"" << py1 - py0
      << "\" class=\"plot\"/>\n";
  if (xmin > xmax) {
    svg << "<text x=\"" << (px0 + px1) / 2 << "\" y=\"" << (py0 + py1) / 2
        << "\" class=\"nodata\">no data</text>\n</g>\n";
    return;
  }
  if (panel.from_zero) {
    ymin = std::min(ymin, 0.0);
    ymax = std::max(ymax, 0.0);
  }
  // A legend sits top right inside the plot; up to 4 entries, the y range grows to keep the lines
  // below it (more entries would squash the lines, so those overlap a translucent legend).
  std::vector<const Series*> shown;
  for (const Series& s : panel.series)
    if (!s.empty()) shown.push_back(&s);
  constexpr std::size_t kMaxEntries = 8;
  const std::size_t entries = shown.size() > 1 ? std::min(shown.size(), kMaxEntries) : 0;
  const bool more = shown.size() > kMaxEntries;
  const double legend_h = 8 + 15 * static_cast<double>(entries + (more ? 1 : 0));
  if (entries > 0 && entries <= 4 && ymax > ymin) {
    const double free = 1 - (legend_h + 10) / (py1 - py0);
    ymax = ymin + (ymax - ymin) / free;
  }
  const Axis ax = nice_axis(xmin, xmax, 5), ay = nice_axis(ymin, ymax, 5);
  auto sx = [&](double x) { return px0 + (x - ax.lo) / (ax.hi - ax.lo) * (px1 - px0); };
  auto sy = [&](double y) { return py1 - (y - ay.lo) / (ay.hi - ay.lo) * (py1 - py0); };

  for (const double t : ay.ticks) {
    const double y = sy(t);
    svg << "<line x1=\"" << px0 << "\" y1=\"" << fmt("%.1f", y) << "\" x2=\"" << px1 << "\" y2=\"" << fmt("%.1f", y)
        << "\" class=\"grid\"/>\n"
        << "<text x=\"" << px0 - 6 << "\" y=\"" << fmt("%.1f", y) << "\" dy=\"0.32em\" class=\"ytick\">"
        << tick_label(t, ay) << "</text>\n";
  }
  for (const double t : ax.ticks) {
    const double x = sx(t);
    svg << "<line x1=\"" << fmt("%.1f", x) << "\" y1=\"" << py1 << "\" x2=\"" << fmt("%.1f", x) << "\" y2=\"" << py1 + 4
        << "\" class=\"axis\"/>\n"
        << "<text x=\"" << fmt("%.1f", x) << "\" y=\"" << py1 + 17 << "\" class=\"xtick\">" << tick_label(t, ax)
        << "</text>\n";
  }
  svg << "<polyline points=\"" << px0 << "," << py0 << " " << px0 << "," << py1 << " " << px1 << "," << py1
      << "\" class=\"axis\"/>\n"
      << "<text x=\"" << (px0 + px1) / 2 << "\" y=\"" << py1 + 35 << "\" class=\"xlabel\">" << xml_escape(panel.x_label)
      << "</text>\n";

  for (const Series& s : panel.series) {
    for (const auto& seg : s.segments) {
      svg << "<polyline data-series=\"" << xml_escape(s.name) << "\" stroke=\"" << s.color << "\""
          << (s.dashed ? " stroke-dasharray=\"5,3\"" : "") << " class=\"line\" points=\"";
      for (std::size_t i = 0; i < seg.size(); ++i)
        svg << (i ? " " : "") << fmt("%.1f", sx(seg[i].x)) << "," << fmt("%.1f", sy(seg[i].y));
      svg << "\"><title>" << xml_escape(s.name) << "</title></polyline>\n";
      if (seg.size() == 1)
        svg << "<circle cx=\"" << fmt("%.1f", sx(seg[0].x)) << "\" cy=\"" << fmt("%.1f", sy(seg[0].y))
            << "\" r=\"2.5\" fill=\"" << s.color << "\"/>\n";
    }
  }

  // Legend, top right inside the plot, for panels with more than one series.
  if (entries > 0) {
    std::size_t chars = 0;
    for (std::size_t i = 0; i < entries; ++i) chars = std::max(chars, shown[i]->name.size());
    const double w = 34 + 6.2 * static_cast<double>(std::max<std::size_t>(chars, more ? 8 : 0));
    const double lx = px1 - w - 6, ly = py0 + 6;
    svg << "<rect x=\"" << fmt("%.1f", lx) << "\" y=\"" << ly << "\" width=\"" << fmt("%.1f", w) << "\" height=\""
        << legend_h << "\" class=\"legend\"/>\n";
    for (std::size_t i = 0; i < entries; ++i) {
      const double y = ly + 12 + 15 * static_cast<double>(i);
      svg << "<line x1=\"" << fmt("%.1f", lx + 6) << "\" y1=\"" << y - 4 << "\" x2=\"" << fmt("%.1f", lx + 24)
          << "\" y2=\"" << y - 4 << "\" stroke=\"" << shown[i]->color << "\" stroke-width=\"2\""
          << (shown[i]->dashed ? " stroke-dasharray=\"5,3\"" : "") << "/>\n"
          << "<text x=\"" << fmt("%.1f", lx + 29) << "\" y=\"" << y << "\" class=\"legendtext\">"
          << xml_escape(shown[i]->name) << "</text>\n";
    }
    if (more)
      svg << "<text x=\"" << fmt("%.1f", lx + 29) << "\" y=\"" << ly + 12 + 15 * static_cast<double>(entries)
          << "\" class=\"legendtext\">+" << shown.size() - entries << " more</text>\n";
  }
  svg << "</g>\n";
}

}  // namespace

std::string render_report_svg(const std::vector<JsonLine>& all_records,
                              const std::map<int, std::vector<JsonLine>>& servers, const std::string& title) {
  // The training intervals' records, and the test file's evaluations (train.eval_every_epochs),
  // which have test_ fields instead: each its own series, so neither breaks the other's lines.
  std::vector<JsonLine> metrics, tests;
  for (const JsonLine& line : all_records) (line.numbers.count("test_accuracy") != 0 ? tests : metrics).push_back(line);
  if (metrics.empty()) metrics = all_records;  // only evaluations: draw what there is
  std::vector<Panel> panels;
  const std::string blue = kPalette[0];
  panels.push_back({"Loss",
                    "step",
                    true,
                    {make_series(
                        metrics, "step", [](const JsonLine& l) { return field(l, "loss"); }, "loss", blue)}});
  panels.push_back({"Accuracy (training batches)",
                    "step",
                    false,
                    {make_series(
                        metrics, "step", [](const JsonLine& l) { return field(l, "accuracy"); }, "accuracy", blue)}});
  if (!tests.empty()) {
    panels.back().title = "Accuracy";
    panels.back().series.push_back(make_series(
        tests, "step", [](const JsonLine& l) { return field(l, "test_accuracy"); }, "test", kPalette[1]));
  }
  panels.push_back(
      {"Throughput (samples/s)",
       "step",
       true,
       {make_series(
           metrics, "step", [](const JsonLine& l) { return field(l, "samples_per_s"); }, "samples/s", blue)}});
  Panel ranks{"Step time per rank (ms)", "step", true, {}};
  std::size_t world = 0;
  for (const JsonLine& l : metrics) {
    const auto it = l.arrays.find("rank_step_ms");
    if (it != l.arrays.end()) world = std::max(world, it->second.size());
  }
  for (std::size_t r = 0; r < world; ++r) {
    ranks.series.push_back(make_series(
        metrics, "step",
        [r](const JsonLine& l) {
          const auto it = l.arrays.find("rank_step_ms");
          return it != l.arrays.end() && r < it->second.size() ? it->second[r] : std::nan("");
        },
        "rank " + std::to_string(r), kPalette[r % kPaletteSize]));
  }
  panels.push_back(std::move(ranks));
  panels.push_back({"Learning rate",
                    "step",
                    true,
                    {make_series(
                        metrics, "step", [](const JsonLine& l) { return field(l, "lr"); }, "lr", blue)}});
  if (!servers.empty()) {
    Panel staleness{"Parameter-server staleness (updates behind)", "server updates", true, {}};
    std::size_t k = 0;
    for (const auto& [rank, lines] : servers) {
      const std::string color = kPalette[k++ % kPaletteSize];
      const std::string who = "server " + std::to_string(rank);
      staleness.series.push_back(make_series(
          lines, "updates", [](const JsonLine& l) { return field(l, "staleness_mean"); }, who + " mean", color));
      staleness.series.push_back(make_series(
          lines, "updates", [](const JsonLine& l) { return field(l, "staleness_max"); }, who + " max", color, true));
    }
    panels.push_back(std::move(staleness));
  }

  // Header line: what was run, in a few figures.
  const JsonLine& last = metrics.back();
  std::string summary = "steps " + fmt("%.0f", metrics.front().numbers.at("step")) + " to " +
                        fmt("%.0f", last.numbers.at("step")) + ", " + std::to_string(metrics.size()) + " points";
  if (std::isfinite(field(last, "loss"))) summary += ", final loss " + fmt("%.4g", field(last, "loss"));
  if (std::isfinite(field(last, "accuracy"))) summary += ", final accuracy " + fmt("%.4g", field(last, "accuracy"));
  if (std::isfinite(field(last, "samples_per_s")))
    summary += ", " + fmt("%.0f", field(last, "samples_per_s")) + " samples/s";
  if (world > 0) summary += ", " + std::to_string(world) + (world == 1 ? " rank" : " ranks");
  if (!servers.empty())
    summary +=
        ", " + std::to_string(servers.size()) + (servers.size() == 1 ? " parameter server" : " parameter servers");

  const std::size_t rows = (panels.size() + 1) / 2;
  const double height = kHeader + kPanelH * static_cast<double>(rows) + 8;
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << kWidth << " " << height << "\" font-family=\"sans-serif\">\n"
      << "<style>\n"
         "text { fill: #222; font-size: 11px; }\n"
         ".heading { font-size: 17px; font-weight: bold; }\n"
         ".summary { font-size: 12px; fill: #555; }\n"
         ".title { font-size: 13px; font-weight: bold; }\n"
         ".plot { fill: #fcfcfc; stroke: none; }\n"
         ".grid { stroke: #e3e3e3; stroke-width: 1; }\n"
         ".axis { stroke: #555; stroke-width: 1; fill: none; }\n"
         ".ytick { text-anchor: end; fill: #444; }\n"
         ".xtick { text-anchor: middle; fill: #444; }\n"
         ".xlabel { text-anchor: middle; fill: #444; font-size: 11px; }\n"
         ".line { fill: none; stroke-width: 1.8; stroke-linejoin: round; stroke-linecap: round; }\n"
         ".legend { fill: #ffffff; fill-opacity: 0.85; stroke: #ccc; }\n"
         ".legendtext { font-size: 11px; }\n"
         ".nodata { text-anchor: middle; fill: #999; font-size: 13px; }\n"
         "</style>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      << "<text x=\"20\" y=\"28\" class=\"heading\">" << xml_escape(title) << "</text>\n"
      << "<text x=\"20\" y=\"48\" class=\"summary\">" << xml_escape(summary) << "</text>\n";
  for (std::size_t i = 0; i < panels.size(); ++i) {
    draw_panel(svg, panels[i], kPanelW * static_cast<double>(i % 2), kHeader + kPanelH * static_cast<double>(i / 2));
  }
  svg << "</svg>\n";
  return svg.str();
}

ReportResult write_report(const std::string& run_dir, const std::string& out_path) {
  namespace fs = std::filesystem;
  struct stat info {};
  if (std::string why = data::unreachable_path(run_dir, &info); !why.empty() || !S_ISDIR(info.st_mode)) {
    throw IoError("report: run directory '" + run_dir + "' " + (why.empty() ? "is not a directory" : why) +
                  " (expected the checkpoint.dir of a run, holding metrics.jsonl)");
  }
  // A non-finite step's records ("nonfinite": the rank it came from) carry nothing to draw.
  const std::string metrics_path = (fs::path(run_dir) / "metrics.jsonl").string();
  std::vector<JsonLine> metrics = read_json_lines(metrics_path, "step");
  const size_t records = metrics.size();
  std::erase_if(metrics, [](const JsonLine& line) { return line.numbers.count("nonfinite") != 0; });
  if (metrics.empty())
    throw DataError("metrics file '" + metrics_path + "' holds no figures to draw, only " + std::to_string(records) +
                    " non-finite step record(s) (the run ended before its first train.log_every steps)");

  const std::string path = out_path.empty() ? (fs::path(run_dir) / "report.svg").string() : out_path;
  std::vector<std::string> inputs{metrics_path};
  std::map<int, std::vector<JsonLine>> servers;
  static const std::regex kServerFile(R"(metrics\.rank([0-9]{1,9})\.jsonl)");
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, m, kServerFile)) {
      // A server that has not logged yet leaves an empty file: no panel line for it.
      inputs.push_back(entry.path().string());
      auto lines = read_json_lines(entry.path().string(), "updates", true);
      if (!lines.empty()) servers[std::stoi(m[1].str())] = std::move(lines);
    }
  }
  refuse_output_that_is_input("report: --out", path, inputs);
  const std::string svg = render_report_svg(metrics, servers, "mgtrain run " + run_dir);
  // A report replaced whole or not at all, in the words the report has always used: a path that
  // cannot be opened (a missing directory, or a directory itself), or a write that failed.
  AtomicFile out(path, "report", [&path](AtomicFile::Step step, int error) {
    if (step == AtomicFile::Step::create || (step == AtomicFile::Step::rename && error == EISDIR))
      return "report: cannot open '" + path + "' for writing";
    return "report: writing '" + path + "' failed";
  });
  out.create();
  out.commit(svg);
  return {path, metrics.size()};
}

}  // namespace mgt
