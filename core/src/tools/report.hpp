#pragma once
// `mgtrain report`: one self-contained SVG picture of a run, drawn from its metrics files.
//
// Reads RUN_DIR/metrics.jsonl (rank 0's lines, one every train.log_every steps; a resumed run
// appends to the same file) and, where present, RUN_DIR/metrics.rank<R>.jsonl (a parameter
// server's staleness lines). Draws panels for loss, accuracy, samples/s, per-rank step time,
// learning rate and staleness; a panel whose figures no line carries says "no data".
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace mgt {

// One flat JSON object: numbers (null, mgtrain's word for a figure that is not finite, is NaN) and
// arrays of numbers or of per-rank objects of numbers; strings and booleans are accepted and skipped.
struct JsonLine {
  std::map<std::string, double> numbers;
  std::map<std::string, std::vector<double>> arrays;
};

// Parses one line with nlohmann/json; a malformed one throws DataError "<file>:<line_no>: expected ...".
JsonLine parse_json_line(const std::string& text, const std::string& file, std::size_t line_no);

// Every non-blank line of a metrics file, in order. A missing file throws IoError; an empty one
// (no object at all), a malformed line or one without the numeric field `required` throws
// DataError naming file and line; with allow_empty an empty file gives no lines instead.
std::vector<JsonLine> read_json_lines(const std::string& path, const std::string& required, bool allow_empty = false);

struct ReportResult {
  std::string path;    // where the SVG was written
  std::size_t points;  // lines of metrics.jsonl drawn
};

// Renders the SVG of the run in run_dir (the text, no file written). `title` heads the picture.
std::string render_report_svg(const std::vector<JsonLine>& metrics, const std::map<int, std::vector<JsonLine>>& servers,
                              const std::string& title);

// Reads run_dir's metrics and writes the SVG to out_path (run_dir/report.svg when empty).
ReportResult write_report(const std::string& run_dir, const std::string& out_path);

}  // namespace mgt
