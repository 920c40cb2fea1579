#include "runtime/run.hpp"

#include <algorithm>

namespace mgt {

Run::Run(Communicator& comm, TrainOptions options, std::ostream& log)
    : comm(comm),
      options(std::move(options)),
      config(this->options.config),
      printable_log(log),
      drawn_log(this->options.quiet ? null_log : log),
      log(this->options.quiet ? null_log : printable_log),
      registry(this->options.plugin_paths),
      leader(comm.rank() == 0) {}

bool Run::spans_nodes() const {
  return std::any_of(rank_hosts.begin(), rank_hosts.end(), [&](const auto& h) { return h != rank_hosts[0]; });
}

}  // namespace mgt
