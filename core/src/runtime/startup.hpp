#pragma once
// Start-up: what every rank does before step 1, each step checked and agreed by all ranks. The
// config and its data are checked as startup_checks.hpp says (what `mgtrain doctor --config` runs
// too), the checkpoint directory claimed, the device opened, the model, optimizer and sync strategy
// made, the data reader started and the step compiled.
#include <string>

#include "mgtrain/config.hpp"
#include "runtime/startup_checks.hpp"

namespace mgt {

struct Run;

// %j in a path becomes the Slurm job id, as in sbatch's --output, or "local" outside Slurm. All
// ranks of a job (and a supervisor starting it) see the same SLURM_JOB_ID, so they agree.
std::string with_job_id(std::string path);

// metrics.file, or metrics.jsonl in the checkpoint directory.
std::string metrics_path(const Config& config, const std::string& checkpoint_dir);

// The run's start-up, every step of it agreed by all ranks: config and plugins, the checkpoint
// directory claimed, the device chosen, model, optimizer, sync strategy, parameters, data and the
// compiled step; then that every rank holds the same config, plugins and model.
void start_run(Run& run);

// The last of start-up, after any resume: the run's length, its checkpoints' metadata, the
// training ranks' communicator, the step's state uploaded and the timeline started.
void prepare_run(Run& run);

}  // namespace mgt
