#include "testing/fault_injection.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "mgtrain/error.hpp"

namespace mgt::fault {

namespace {

enum class Action { kill, exit, raise, hang };

struct Spec {
  int64_t step = 0;
  Phase phase = Phase::forward;
  Action action = Action::kill;
};
Spec spec;

constexpr std::pair<const char*, Phase> kPhases[] = {
    {"forward", Phase::forward},
    {"backward", Phase::backward},
    {"allreduce", Phase::allreduce},
    {"optimizer", Phase::optimizer},
    {"checkpoint-before-data", Phase::checkpoint_before_data},
    {"checkpoint-after-data", Phase::checkpoint_after_data},
    {"checkpoint-before-rename", Phase::checkpoint_before_rename},
};
constexpr std::pair<const char*, Action> kActions[] = {
    {"kill", Action::kill}, {"exit", Action::exit}, {"throw", Action::raise}, {"hang", Action::hang}};

const char* phase_name(Phase phase) {
  for (const auto& [name, p] : kPhases)
    if (p == phase) return name;
  return "?";
}

}  // namespace

namespace detail {
bool armed = false;

void fire(Phase phase, int64_t step) {
  if (phase != spec.phase || step != spec.step) return;
  armed = false;  // once
  // MGTRAIN_FAULT_ONCE=FILE: once in all the job's attempts (a supervisor restarting it keeps the
  // environment): the first to fire creates FILE, and a fault finding it there does nothing.
  if (const char* once = std::getenv("MGTRAIN_FAULT_ONCE"); once && *once) {
    const int fd = ::open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ::close(fd);
  }
  std::fprintf(stderr, "mgtrain: injected fault (MGTRAIN_FAULT) at step %lld in %s\n", static_cast<long long>(step),
               phase_name(phase));
  std::fflush(stderr);
  switch (spec.action) {
    case Action::kill:
      ::kill(::getpid(), SIGKILL);
      break;
    case Action::exit:
      std::_Exit(1);
    case Action::raise:
      throw Error(std::string("injected fault at step ") + std::to_string(step) + " in " + phase_name(phase));
    case Action::hang:
      std::this_thread::sleep_for(std::chrono::hours(1));
      break;
  }
}
}  // namespace detail

void configure(int rank) {
  const char* text = std::getenv("MGTRAIN_FAULT");
  detail::armed = false;
  if (text == nullptr || *text == '\0') return;
  const std::string value(text);
  auto bad = [&](const std::string& why) {
    return ConfigError("MGTRAIN_FAULT='" + value + "': " + why +
                       " (expected RANK:STEP:PHASE:ACTION, e.g. 3:12:allreduce:kill)");
  };
  int fault_rank = -1;
  long long step = 0;
  char phase[64] = {}, action[16] = {};
  if (std::sscanf(text, "%d:%lld:%63[a-z-]:%15[a-z]", &fault_rank, &step, phase, action) != 4 || fault_rank < 0 ||
      step < 1)
    throw bad("malformed");
  bool found_phase = false, found_action = false;
  for (const auto& [name, p] : kPhases)
    if (name == std::string(phase)) spec.phase = p, found_phase = true;
  for (const auto& [name, a] : kActions)
    if (name == std::string(action)) spec.action = a, found_action = true;
  if (!found_phase) throw bad(std::string("unknown phase '") + phase + "'");
  if (!found_action) throw bad(std::string("unknown action '") + action + "'");
  spec.step = step;
  detail::armed = fault_rank == rank;
}

namespace {

int slowdown_ms(int rank) {
  const char* spec = std::getenv("MGTRAIN_TEST_SLOW_RANK");
  int slow_rank = -1, ms = 0;
  if (spec && std::sscanf(spec, "%d:%d", &slow_rank, &ms) == 2 && slow_rank == rank) return ms;
  return 0;
}

}  // namespace

std::unique_ptr<TrainingCallback> make_slowdown_callback(int rank) {
  class Slowdown final : public TrainingCallback {
   public:
    explicit Slowdown(int ms) : ms_(ms) {}
    void on_step_begin(int64_t) override { std::this_thread::sleep_for(std::chrono::milliseconds(ms_)); }

   private:
    int ms_;
  };
  const int ms = slowdown_ms(rank);
  return ms > 0 ? std::make_unique<Slowdown>(ms) : nullptr;
}

int64_t nan_step(int rank) {
  const char* spec = std::getenv("MGTRAIN_TEST_NAN_AT");
  int nan_rank = -1;
  long long step = 0;
  if (spec && std::sscanf(spec, "%d:%lld", &nan_rank, &step) == 2 && nan_rank == rank) return step;
  return 0;
}

bool step_in_device_memory() {
  const char* flag = std::getenv("MGTRAIN_TEST_STEP_IN_DEVICE_MEMORY");
  return flag && std::string(flag) == "1";
}

}  // namespace mgt::fault
