#pragma once
// A polite stop: SIGTERM (scancel, a job's time limit), SIGINT and SIGUSR1 (sbatch --signal) set a
// flag instead of killing the rank; the training loop agrees on it across ranks, writes a final
// checkpoint and ends, so resubmitting with --resume latest continues.
namespace mgt {

void install_stop_handlers();
bool stop_requested();
int stop_signal();  // the signal that asked, 0 if none

}  // namespace mgt
