#pragma once
// A polite stop: SIGTERM (scancel, a job's time limit, mpirun passing on Ctrl-C or its own
// SIGTERM), SIGINT and SIGUSR1 (sbatch --signal) set a flag instead of killing the rank; the
// training loop agrees on it across ranks after the step that runs, writes a final checkpoint and
// ends, so resubmitting with --resume latest continues.
//
// No thread that computes ever runs a handler for them: they are blocked in every thread but one
// of their own, which takes them with sigwaitinfo. A handler run on a computing thread interrupts
// oneDNN's JIT GEMM kernels, which (in the oneDNN releases before the fix of its issue 4845, Debian
// 12's 2.6.3 among them) point the stack pointer at a heap buffer while they run: the kernel's
// signal frame was written over the heap, and the rank died later in free() or malloc().
#include <functional>
#include <string>

namespace mgt {

// Blocks the stop signals in the calling thread, and so in every thread it starts after this
// (MPI's, oneDNN's, the data reader's), and starts the thread that takes them. Call it before any
// other thread starts. Until stop signals are accepted a signal ends the process as it would have
// without this (the default action), so a stop before training starts is not held up.
void take_stop_signals();
// From now on a stop signal sets the flag below (takes the signals first where that was not done).
void accept_stop_signals();
bool stop_signals_accepted();  // a command that stops politely (train), not bench or verify
bool stop_requested();
int stop_signal();  // the first signal that asked, 0 if none

// A stop that cannot wait for the step in flight (a step of minutes): while a training loop runs,
// it leaves `end_now` here. Called on the signal thread, while the computing threads go on, when
// a stop signal comes again at least kRepeatGap after the first ("a second signal came ...") or
// when a stop has been pending for `grace_s` seconds (0: no limit) without the loop taking it
// ("... did not end within ..."); it gets that signal and the reason, and must not return (it
// ends the process; nothing new is written, so the newest checkpoint stays the intact one).
using EndNow = std::function<void(int signal, const std::string& why)>;
void end_now_on_a_stop_not_taken(EndNow end_now, double grace_s);
// The loop stepped for the last time (a stop agreed, or the run's end): later signals are only
// noted, and the final checkpoint is written however long it takes. Where end_now has already
// begun, waits for it to end the process.
void stop_taken();
// Signals within this many seconds of the first are that same stop reaching the rank by several
// paths (scancel signals the job's steps and srun passes on what it got) or a burst of them, not
// a second request.
inline constexpr double kRepeatGap = 1.0;

// Ends the process as `signal` would have by its default action (the exit status a shell and
// mpirun expect), from a thread that took the signal with sigwait.
[[noreturn]] void end_by_default_action(int signal);

}  // namespace mgt
