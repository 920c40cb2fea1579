#pragma once
// The runtime's results (TrainResult, EvalResult) as one JSON line each, in io/json_line's
// convention. Here rather than in io/, which sits below the runtime and knows none of its types.
#include <string>

namespace mgt {

struct EvalResult;
struct TrainResult;

// `mgtrain train --json`: rank 0's result line.
std::string train_result_json(const TrainResult& r, int world_size);
// `mgtrain eval --json`.
std::string eval_result_json(const EvalResult& r);

}  // namespace mgt
