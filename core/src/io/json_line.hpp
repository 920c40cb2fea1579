#pragma once
// The JSON lines mgtrain writes (metrics records, the --json results of train, bench and eval),
// all through nlohmann/json, in one convention (each result type serialises itself beside its
// definition, with these helpers): compact ("key":value, no spaces), keys in the
// order written, strings escaped, numbers rounded as they were always printed, and a number that
// is not finite (NaN, Inf) written as null. Private to libmgtrain and the launcher: nlohmann/json
// is no part of the SDK's headers.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace mgt {

struct GpuSample;

// Keeps keys in insertion order: shell scripts read these lines with sed, and people with eyes.
using JsonValue = nlohmann::ordered_json;

// `value` as printf's %.<digits>g would print it; null when not finite.
JsonValue json_significant(double value, int digits);
// `value` as printf's %.<decimals>f would print it, less trailing zeros; null when not finite.
JsonValue json_fixed(double value, int decimals);
// One line of text, no newline; bytes that are not UTF-8 (a path, say) become U+FFFD, not an error.
std::string json_line(const JsonValue& value);

// The sample as a metrics record carries it, MB being MiB as nvidia-smi counts them:
// {"util":93,"mem_used_mb":10240.5,"mem_total_mb":143771,"temp_c":51}, or null when invalid.
// Figures have at most one decimal; a NaN one is null.
JsonValue gpu_sample_json(const GpuSample& sample);

}  // namespace mgt
