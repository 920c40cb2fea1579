#include "runtime/trainer.hpp"

#include "runtime/init_from.hpp"
#include "runtime/resume.hpp"
#include "runtime/run.hpp"
#include "runtime/serving_loop.hpp"
#include "runtime/training_loop.hpp"

namespace mgt {

TrainResult train(Communicator& comm, TrainOptions options, std::ostream& log) {
  Run run(comm, std::move(options), log);
  start_run(run);
  if (!run.options.resume.empty()) resume(run);
  initialize_from_checkpoint(run);
  prepare_run(run);
  if (run.serving) start_serving(run);
  // Chosen once: a parameter server's serving ranks run their own loop.
  if (!run.trains()) return serve(run);
  try {
    return TrainingLoop(run).run();
  } catch (const StartupError&) {
    // Every lock-step rank stops here together (a non-finite gradient): the trace shows the run up to it.
    if (run.trace && !run.serving) run.trace->write(run.comm, true, run.log);
    throw;
  }
}

}  // namespace mgt
