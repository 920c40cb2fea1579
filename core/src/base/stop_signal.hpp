#pragma once
// A polite stop: SIGTERM (scancel, a job's time limit, mpirun passing on Ctrl-C or its own
// SIGTERM), SIGINT and SIGUSR1 (sbatch --signal) set a flag instead of killing the rank; the
// training loop agrees on it across ranks, writes a final checkpoint and ends, so resubmitting
// with --resume latest continues.
//
// No thread that computes ever runs a handler for them: they are blocked in every thread but one
// of their own, which takes them with sigwaitinfo. A handler run on a computing thread interrupts
// oneDNN's JIT GEMM kernels, which (in the oneDNN releases before the fix of its issue 4845, Debian
// 12's 2.6.3 among them) point the stack pointer at a heap buffer while they run: the kernel's
// signal frame was written over the heap, and the rank died later in free() or malloc().
namespace mgt {

// Blocks the stop signals in the calling thread, and so in every thread it starts after this
// (MPI's, oneDNN's, the data reader's), and starts the thread that takes them. Call it before any
// other thread starts. Until stop signals are accepted a signal ends the process as it would have
// without this (the default action), so a stop before training starts is not held up.
void take_stop_signals();
// From now on a stop signal sets the flag below (takes the signals first where that was not done).
void accept_stop_signals();
bool stop_requested();
int stop_signal();  // the first signal that asked, 0 if none

}  // namespace mgt
