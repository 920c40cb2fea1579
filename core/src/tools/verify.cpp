#include "tools/verify.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <ostream>

#include "base/sha256.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/mpi_communicator.hpp"

namespace mgt {

namespace {

// SHA-256 over every parameter, in name order: name, then the raw float32 bytes.
std::string parameter_hash(const std::string& checkpoint) {
  Sha256 sha;
  for (const auto& t : read_checkpoint_group(checkpoint, "/params")) {
    sha.update(t.name.data(), t.name.size());
    sha.update(t.values.data(), t.values.size() * sizeof(float));
  }
  return sha.hex_digest();
}

// A run of `max_steps`, stopped after `stop_at_step` where that is sooner (0: not stopped).
std::string run(Communicator& comm, TrainOptions options, const std::string& dir, int64_t max_steps,
                const std::string& resume, int64_t stop_at_step = 0) {
  options.quiet = true;
  options.stop_at_step = stop_at_step;
  options.resume = resume;
  options.config.set("checkpoint.dir", dir, "mgtrain verify");
  options.config.set("checkpoint.every_steps", "0", "mgtrain verify");
  options.config.set("data.test", "", "mgtrain verify");
  options.config.set("train.max_steps", std::to_string(max_steps), "mgtrain verify");
  std::ostream silent(nullptr);
  return train(comm, std::move(options), silent).checkpoint;
}

}  // namespace

bool run_verify(Communicator& world, const TrainOptions& options, int64_t steps, int other_world, std::ostream& out) {
  if (steps < 2) throw ConfigError("verify: --steps must be at least 2, got " + std::to_string(steps));
  if (other_world < 0 || other_world > world.size())
    throw ConfigError("verify: --world-size must be between 1 and the job's " + std::to_string(world.size()) +
                      " ranks, got " + std::to_string(other_world));
  // A scratch directory named by rank 0, under the run's checkpoint directory.
  const std::string base =
      options.config.has("checkpoint.dir") ? options.config.get_string("checkpoint.dir") : "checkpoints";
  int64_t id = getpid();
  world.broadcast(&id, sizeof(id), 0);
  const std::string scratch = (std::filesystem::path(base) / ("verify-" + std::to_string(id))).string();

  const std::string straight = run(world, options, scratch + "/straight", steps, "");
  // Stopped midway, not a shorter run: the schedule's curve (a cosine over train.max_steps) is the
  // straight run's.
  run(world, options, scratch + "/resumed", steps, "", steps / 2);
  const std::string resumed = run(world, options, scratch + "/resumed", steps, "latest");
  std::string other;
  if (other_world > 0) {
    auto part = world.split(world.rank() < other_world ? 0 : 1, world.rank());
    agree_after_sleeping(world, "the run on the first " + std::to_string(other_world) + " rank(s)", [&] {
      if (world.rank() < other_world) other = run(*part, options, scratch + "/world", steps, "");
    });
  }

  int64_t pass = 1;
  if (world.rank() == 0) {
    const std::string a = parameter_hash(straight), b = parameter_hash(resumed);
    out << "straight " << steps << " steps on " << world.size() << " rank(s):  " << a << "\n"
        << steps / 2 << " + stop + resume + " << steps - steps / 2 << ":          " << b << "  "
        << (a == b ? "same" : "DIFFERENT") << "\n";
    pass = a == b;
    if (other_world > 0) {
      const std::string c = parameter_hash(other);
      out << "straight on " << other_world << " rank(s):             " << c << "  " << (a == c ? "same" : "DIFFERENT")
          << "\n";
      if (a != c && !(options.config.has("sync.deterministic") && options.config.get_bool("sync.deterministic")))
        out << "(identity across world sizes needs sync.deterministic = true)\n";
      pass = pass && a == c;
    }
    out << (pass ? "PASS" : "FAIL") << "\n" << std::flush;
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  world.broadcast(&pass, sizeof(pass), 0);
  return pass != 0;
}

}  // namespace mgt
