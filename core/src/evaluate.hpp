#pragma once
// Evaluation of a checkpoint on a data file: the model is rebuilt from the config stored in the
// checkpoint, so no config file is needed.
#include <cstdint>
#include <string>
#include <vector>

namespace mgt {

struct EvalResult {
  double accuracy = 0;
  double loss = 0;
  int64_t samples = 0;
};

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               const std::vector<std::string>& plugin_paths, int64_t batch);

}  // namespace mgt
