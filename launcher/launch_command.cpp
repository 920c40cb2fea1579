// `mgtrain launch`: a supervisor around one training job that survives losing nodes. It starts
// mpirun over the hostfile's nodes (or, inside a Slurm allocation, srun over the allocation's),
// and when the job ends because a node was lost (a line of the launcher's or mgtrain's naming it,
// or a node that no longer answers a probe), drops that node and starts the job again on the
// nodes left with --resume latest. The run keeps its global batch,
// and in deterministic mode ends with the bits of the run never interrupted (resuming at another
// world size changes nothing). A job that fails for any other reason is not restarted.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/atomic_file.hpp"
#include "checkpoint/checkpoint.hpp"
#include "command_line_config.hpp"
#include "commands.hpp"
#include "io/append_file.hpp"
#include "io/json_line.hpp"
#include "mgtrain/error.hpp"
#include "runtime/startup.hpp"

namespace po = boost::program_options;

namespace mgt::cli {

namespace {

struct Node {
  std::string name;
  int slots = 1;
};

// Open MPI's hostfile: "name [slots=N] [max_slots=M]" a line, '#' comments.
std::vector<Node> read_hostfile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw ConfigError("--hostfile '" + path +
                      "': " + (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file") +
                      " (expected Open MPI's hostfile: a node a line, 'name slots=N')");
  std::ifstream in(path);
  if (!in) throw ConfigError("--hostfile '" + path + "' cannot be read: " + std::strerror(errno));
  std::vector<Node> nodes;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    Node node;
    if (!(words >> node.name)) continue;
    for (std::string word; words >> word;) {
      if (word.rfind("slots=", 0) != 0) continue;
      const std::string count = word.substr(6);
      char* end = nullptr;
      const long slots = std::strtol(count.c_str(), &end, 10);
      if (count.empty() || *end != '\0' || slots < 1 || slots > 4096)
        throw ConfigError("--hostfile '" + path + "' line " + std::to_string(number) + ": slots '" + count +
                          "': expected a whole number from 1 to 4096");
      node.slots = static_cast<int>(slots);
    }
    if (std::any_of(nodes.begin(), nodes.end(), [&](const Node& n) { return n.name == node.name; }))
      throw ConfigError("--hostfile '" + path + "' line " + std::to_string(number) + ": node '" + node.name +
                        "' is listed twice (expected each node once, with its slots)");
    nodes.push_back(node);
  }
  if (nodes.empty()) throw ConfigError("--hostfile '" + path + "' names no node (expected a node a line)");
  return nodes;
}

std::string names_of(const std::vector<Node>& nodes) {
  std::string out;
  for (const Node& n : nodes) out += (out.empty() ? "" : ", ") + n.name;
  return out.empty() ? "none" : out;
}

int ranks_of(const std::vector<Node>& nodes) {
  int ranks = 0;
  for (const Node& n : nodes) ranks += n.slots;
  return ranks;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The nodes the job's output names as lost. The launcher's lines come first: a daemon Open MPI
// lost, a process killed by SIGKILL (the node's processes killed, or the node gone); srun's node
// failure or tasks killed. Else mgtrain's
// watchdog: at its deadline it names a node none of whose ranks reached the collective (a stopped
// node, which mpirun cannot see); failing that, its shorter roll call when mpirun's SIGTERM came.
class LostNodes {
 public:
  void read(const std::string& line) {
    static const std::regex daemon(R"(Remote daemon: .* on node (\S+))");
    static const std::regex killed(R"(on node (\S+) exited on signal 9\b)");
    static const std::regex node_failure(R"(^srun: error: Node failure on (\S+))");
    static const std::regex tasks_killed(R"(^srun: error: (\S+): tasks? [0-9,-]+: Killed)");
    static const std::regex silent(R"(([A-Za-z0-9_.-]+) \(all of its ranks)");
    std::smatch m;
    if (std::regex_search(line, m, daemon) || std::regex_search(line, m, killed) ||
        std::regex_search(line, m, node_failure) || std::regex_search(line, m, tasks_killed))
      add(by_launcher_, m[1]);
    if (line.rfind("mgtrain: ", 0) != 0 || line.find("on node") == std::string::npos) return;
    auto& into = line.find("timed out after") != std::string::npos ? by_deadline_ : by_roll_call_;
    for (std::sregex_iterator it(line.begin(), line.end(), silent), end; it != end; ++it) add(into, (*it)[1]);
  }
  const std::vector<std::string>& names() const {
    return !by_launcher_.empty() ? by_launcher_ : !by_deadline_.empty() ? by_deadline_ : by_roll_call_;
  }

 private:
  static void add(std::vector<std::string>& to, const std::string& node) {
    if (std::find(to.begin(), to.end(), node) == to.end()) to.push_back(node);
  }
  std::vector<std::string> by_launcher_, by_deadline_, by_roll_call_;
};

std::atomic<int> stop_signal_received{0};
std::atomic<pid_t> running_child{0};

void forward_stop_signal(int signal) {
  stop_signal_received.store(signal);
  const pid_t child = running_child.load();
  if (child > 0) kill(child, signal);
}

// Runs `argv`, copying its stdout and stderr through and handing each whole line to `on_line`.
// Returns the wait status; with `limit_s` > 0 the child is killed once it runs that long.
template <typename OnLine>
int run_child(const std::vector<std::string>& argv, OnLine on_line, double limit_s = 0, bool quiet = false) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    throw IoError(std::string("pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw IoError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Its own process group: a signal to it reaches mpirun alone, which ends the job its way.
    setpgid(0, 0);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvp(args[0], args.data());
    std::fprintf(stderr, "mgtrain launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  if (!quiet) running_child.store(pid);
  if (!quiet && stop_signal_received.load() != 0) kill(pid, stop_signal_received.load());
  const auto started = std::chrono::steady_clock::now();
  std::string pending[2];
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_pipes = 2;
  bool killed = false;
  while (open_pipes > 0) {
    const int ready = poll(fds, 2, 200);
    if (ready < 0 && errno != EINTR) break;
    const double ran_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (limit_s > 0 && !killed && ran_s > limit_s) {
      kill(-pid, SIGKILL);
      killed = true;
    }
    // A process it started in a group of its own (a remote shell) may hold the pipes open.
    if (killed && ran_s > limit_s + 2) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
        continue;
      }
      if (!quiet) {
        FILE* to = i == 0 ? stdout : stderr;
        std::fwrite(buffer, 1, static_cast<size_t>(n), to);
        std::fflush(to);
      }
      pending[i].append(buffer, static_cast<size_t>(n));
      for (size_t eol; (eol = pending[i].find('\n')) != std::string::npos;) {
        on_line(pending[i].substr(0, eol));
        pending[i].erase(0, eol + 1);
      }
    }
  }
  for (const pollfd& fd : fds)
    if (fd.fd >= 0) close(fd.fd);
  for (const std::string& rest : pending)
    if (!rest.empty()) on_line(rest);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!quiet) running_child.store(0);
  return status;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool on_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && access((dir + "/" + program).c_str(), X_OK) == 0) return true;
  return false;
}

std::string self_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("mgtrain") : path.string();
}

// The nodes of the Slurm job this runs in (`scontrol show hostnames`), each with the job's tasks
// per node (SLURM_NTASKS_PER_NODE, else the first count of SLURM_TASKS_PER_NODE, "2(x3)").
std::vector<Node> slurm_nodes(const std::string& node_list) {
  std::vector<Node> nodes;
  const int status = run_child(
      {"scontrol", "show", "hostnames", node_list},
      [&](const std::string& line) {
        if (!line.empty()) nodes.push_back({line, 1});
      },
      30, /*quiet=*/true);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || nodes.empty())
    throw ConfigError("'scontrol show hostnames " + node_list + "' gave no nodes (status " +
                      std::to_string(exit_code(status)) + "): expected the Slurm job's nodes");
  const char* per_node = std::getenv("SLURM_NTASKS_PER_NODE");
  if (!per_node || !*per_node) per_node = std::getenv("SLURM_TASKS_PER_NODE");
  const int slots = per_node ? std::atoi(per_node) : 1;
  if (slots < 1)
    throw ConfigError("SLURM_TASKS_PER_NODE '" + std::string(per_node) + "': expected a task count per node");
  for (Node& n : nodes) n.slots = slots;
  return nodes;
}

// The rank counts a run can go on with: its global batch, times the micro-batches a rank
// accumulates, and in deterministic mode sync.micro_shards, must divide among the ranks (the
// start-up's own checks, made here so that a restart does not pick nodes the job then refuses).
struct WorldFit {
  int64_t global_batch = 1, accumulation = 1, micro_shards = 0;  // micro_shards 0: not deterministic

  // Empty where `ranks` fits, else why not.
  std::string refusal(int ranks) const {
    if (global_batch % (static_cast<int64_t>(ranks) * accumulation) != 0)
      return "train.global_batch = " + std::to_string(global_batch) +
             (accumulation > 1 ? " (" + std::to_string(accumulation) + " micro-batches accumulated)" : "") +
             " does not divide among " + std::to_string(ranks) + " ranks";
    if (micro_shards > 0 && micro_shards % ranks != 0)
      return "sync.micro_shards = " + std::to_string(micro_shards) + " does not divide among " + std::to_string(ranks) +
             " ranks";
    return "";
  }
};

struct Supervisor {
  std::vector<std::string> launcher;  // mpirun or srun, and its own options
  bool slurm = false;                 // srun inside the allocation, not mpirun over a hostfile
  std::vector<Node> hosts;            // as the hostfile gave them, in its order
  int min_nodes = 1, max_nodes = 0, max_restarts = 3;
  double probe_timeout_s = 20;
  WorldFit fit;
  std::vector<std::string> train_args;  // after "train": the job's own arguments
  std::string checkpoint_dir, metrics_file;

  void say(const std::string& line) const {
    std::fprintf(stderr, "mgtrain launch: %s\n", line.c_str());
    std::fflush(stderr);
  }

  // A record in the run's metrics file, between attempts (no rank writes it then). The step is
  // the one the next attempt resumes from, so `mgtrain report` places it.
  void record(JsonValue fields) const {
    try {
      std::filesystem::create_directories(std::filesystem::path(metrics_file).parent_path());
      AppendFile file(metrics_file, "metrics file");
      const std::string why = file.append(json_line(fields) + "\n");
      if (!why.empty()) say("the metrics file '" + metrics_file + "' took no record: " + why);
    } catch (const std::exception& e) {
      say(std::string("the metrics file took no record: ") + e.what());
    }
  }

  // Whether the launcher can start a process on `node` within the probe's time.
  bool answers(const Node& node) const {
    std::vector<std::string> argv = launcher;
    const std::vector<std::string> probe =
        slurm ? std::vector<std::string>{"--nodes=1", "--ntasks=1", "--nodelist=" + node.name, "true"}
              : std::vector<std::string>{"--host", node.name, "-np", "1", "true"};
    argv.insert(argv.end(), probe.begin(), probe.end());
    const int status = run_child(
        argv, [](const std::string&) {}, probe_timeout_s, /*quiet=*/true);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  int run() {
    std::vector<Node> alive = hosts;
    // Nodes out of the job: those beyond --max-nodes, then those lost. Each restart takes in those
    // that answer, up to --max-nodes.
    std::vector<Node> standby;
    if (static_cast<int>(alive.size()) > max_nodes) {
      standby.assign(alive.begin() + max_nodes, alive.end());
      alive.resize(static_cast<size_t>(max_nodes));
    }
    std::string why_restarted;
    int status = 0;
    for (int attempt = 1;; ++attempt) {
      if (stop_signal_received.load() != 0) {
        say("stopped by signal " + std::to_string(stop_signal_received.load()) + ": not restarted");
        return exit_code(status);
      }
      const std::string resume = attempt > 1 ? read_latest_name(checkpoint_dir).value_or("") : "";
      std::vector<std::string> args = train_args;
      if (attempt > 1) {
        // The user's own --resume named where the first attempt began; later ones continue.
        for (size_t i = 0; i < args.size(); ++i)
          if (args[i] == "--resume" && i + 1 < args.size()) {
            args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
            break;
          } else if (args[i].rfind("--resume=", 0) == 0) {
            args.erase(args.begin() + static_cast<long>(i));
            break;
          }
        if (!resume.empty()) {
          args.emplace_back("--resume");
          args.emplace_back("latest");
        }
      }
      const std::string hostfile = slurm ? "" : write_hostfile(alive);
      std::vector<std::string> argv = launcher;
      if (slurm) {
        std::string names;
        for (const Node& n : alive) names += (names.empty() ? "" : ",") + n.name;
        // One task a slot on each node left; a task that dies ends the step at once.
        for (const std::string& a :
             {"--nodes=" + std::to_string(alive.size()), "--nodelist=" + names,
              "--ntasks=" + std::to_string(ranks_of(alive)), "--ntasks-per-node=" + std::to_string(alive[0].slots),
              std::string("--kill-on-bad-exit=1")})
          argv.push_back(a);
      } else {
        for (const std::string& a :
             {std::string("--hostfile"), hostfile, std::string("-np"), std::to_string(ranks_of(alive))})
          argv.push_back(a);
      }
      argv.push_back(self_executable());
      argv.emplace_back("train");
      argv.insert(argv.end(), args.begin(), args.end());
      say("attempt " + std::to_string(attempt) + " of at most " + std::to_string(max_restarts + 1) + ": " +
          std::to_string(ranks_of(alive)) + " rank(s) on " + names_of(alive) +
          (attempt == 1 ? std::string()
                        : ", " +
                              (resume.empty() ? std::string("starting again from step 0 (no checkpoint yet)")
                                              : "resuming from " + resume) +
                              " after " + why_restarted));
      if (attempt > 1)
        record({{"step", checkpoint_step(resume).value_or(0)},
                {"event", "restart"},
                {"attempt", attempt},
                {"nodes", names_of(alive)},
                {"ranks", ranks_of(alive)},
                {"resumed_from", resume},
                {"reason", why_restarted}});
      LostNodes named;
      const auto started = std::chrono::steady_clock::now();
      status = run_child(argv, [&](const std::string& line) { named.read(line); });
      const std::vector<std::string>& named_lost = named.names();
      if (!hostfile.empty()) std::filesystem::remove(hostfile);
      const double ran_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const int code = exit_code(status);
      if (code == 0) {
        say("attempt " + std::to_string(attempt) + " finished the run on " + names_of(alive));
        return 0;
      }
      if (stop_signal_received.load() != 0) {
        say("stopped by signal " + std::to_string(stop_signal_received.load()) + ": not restarted");
        return code;
      }
      // The nodes lost: those the job's output named, else those that no longer answer.
      std::vector<Node> lost, left;
      for (const Node& n : alive)
        (std::find(named_lost.begin(), named_lost.end(), n.name) != named_lost.end() ? lost : left).push_back(n);
      std::string how = "named in the job's output";
      if (lost.empty()) {
        left.clear();
        for (const Node& n : alive) (answers(n) ? left : lost).push_back(n);
        how = "no longer answering a probe";
      }
      char took[32];
      std::snprintf(took, sizeof took, "%.0f", ran_s);
      if (lost.empty()) {
        say("the job failed with status " + std::to_string(code) + " after " + took +
            " s, and every node answers: not a lost node (see the job's error above), not restarted");
        return code;
      }
      why_restarted = "losing " + names_of(lost) + " (" + how + ")";
      say("the job ended with status " + std::to_string(code) + " after " + took + " s, " + why_restarted);
      if (attempt > max_restarts) {
        say("--max-restarts " + std::to_string(max_restarts) +
            " reached: not restarted; continue with --resume latest");
        return code;
      }
      // Nodes out of the job that answer now join it, up to --max-nodes; those just lost wait a round.
      for (auto it = standby.begin(); it != standby.end() && static_cast<int>(left.size()) < max_nodes;) {
        if (answers(*it)) {
          say("node " + it->name + " answers: it joins the next attempt");
          left.push_back(*it);
          it = standby.erase(it);
        } else {
          ++it;
        }
      }
      standby.insert(standby.end(), lost.begin(), lost.end());
      // Nodes the run cannot split its batch over wait out this attempt, the last taken first.
      while (!left.empty() && !fit.refusal(ranks_of(left)).empty()) {
        say("node " + left.back().name + " waits: " + fit.refusal(ranks_of(left)));
        standby.insert(standby.begin(), left.back());
        left.pop_back();
      }
      if (static_cast<int>(left.size()) < min_nodes) {
        say(std::to_string(left.size()) + " node(s) left (" + names_of(left) + "), below --min-nodes " +
            std::to_string(min_nodes) + ": not restarted; continue with --resume latest once nodes are back");
        return code;
      }
      alive = left;
    }
  }

  std::string write_hostfile(const std::vector<Node>& nodes) const {
    std::string path = (std::filesystem::temp_directory_path() / "mgtrain-launch-hosts-XXXXXX").string();
    const int fd = mkstemp(path.data());
    if (fd < 0) throw IoError("a hostfile in " + path + ": " + std::strerror(errno));
    std::string text;
    for (const Node& n : nodes) text += n.name + " slots=" + std::to_string(n.slots) + "\n";
    const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    if (!written) throw IoError("the hostfile '" + path + "' could not be written");
    return path;
  }
};

}  // namespace

int run_launch(const std::vector<std::string>& all_args) {
  po::options_description desc(
      "usage: mgtrain launch --hostfile FILE [options] -- train --config FILE [train's options]\n"
      "Runs the training job under mpirun on the hostfile's nodes (or srun on a Slurm allocation's:\n"
      "no --hostfile, and sbatch --no-kill so that a lost node does not end the allocation); when a\n"
      "node is lost, starts it\n"
      "again on the nodes left with --resume latest (same global batch, and in deterministic mode\n"
      "the same bits). A job that fails for another reason is not restarted.\noptions");
  desc.add_options()("help", "show this help")(
      "hostfile", po::value<std::string>(),
      "Open MPI hostfile: the nodes, a line each ('name slots=N'); without it, inside a Slurm job, its nodes")(
      "min-nodes", po::value<int>()->default_value(1), "fewest nodes to go on with")(
      "max-nodes", po::value<int>(), "most nodes to use (default: all of the hostfile's)")(
      "max-restarts", po::value<int>()->default_value(3), "restarts after lost nodes, at most")(
      "probe-timeout", po::value<double>()->default_value(20), "seconds a node has to answer a probe")(
      "launcher", po::value<std::string>(),
      "the launcher and its options, split at spaces (default: mpirun, or srun --mpi=pmix in a Slurm job; e.g. "
      "\"mpirun --mca btl tcp,self\")");
  const auto separator = std::find(all_args.begin(), all_args.end(), "--");
  const std::vector<std::string> own(all_args.begin(), separator);
  const std::vector<std::string> job(separator == all_args.end() ? separator : separator + 1, all_args.end());
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(own).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "mgtrain: error: launch: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  Supervisor s;
  try {
    const char* job_nodes = std::getenv("SLURM_JOB_NODELIST");
    s.slurm = !vm.count("hostfile") && job_nodes && *job_nodes;
    if (!vm.count("hostfile") && !s.slurm)
      throw ConfigError("--hostfile FILE is required outside a Slurm job (no SLURM_JOB_NODELIST)");
    if (job.empty() || job.front() != "train")
      throw ConfigError("expected '-- train --config FILE ...' after its own options, found " +
                        (job.empty() ? std::string("nothing") : "'" + job.front() + "'"));
    s.hosts = s.slurm ? slurm_nodes(job_nodes) : read_hostfile(vm["hostfile"].as<std::string>());
    const int hosts = static_cast<int>(s.hosts.size());
    s.min_nodes = vm["min-nodes"].as<int>();
    s.max_nodes = vm.count("max-nodes") ? vm["max-nodes"].as<int>() : hosts;
    s.max_restarts = vm["max-restarts"].as<int>();
    s.probe_timeout_s = vm["probe-timeout"].as<double>();
    if (s.max_restarts < 0)
      throw ConfigError("--max-restarts " + std::to_string(s.max_restarts) + ": expected 0 or more");
    if (s.min_nodes < 1 || s.min_nodes > hosts)
      throw ConfigError("--min-nodes " + std::to_string(s.min_nodes) + ": expected 1 to the hostfile's " +
                        std::to_string(hosts) + " node(s)");
    if (s.max_nodes < s.min_nodes)
      throw ConfigError("--max-nodes " + std::to_string(s.max_nodes) + " is below --min-nodes " +
                        std::to_string(s.min_nodes));
    if (!(s.probe_timeout_s > 0)) throw ConfigError("--probe-timeout: expected a positive number of seconds");
    s.launcher = split_words(vm.count("launcher") ? vm["launcher"].as<std::string>()
                                                  : std::string(s.slurm ? "srun --mpi=pmix" : "mpirun"));
    if (s.launcher.empty()) throw ConfigError("--launcher is empty: expected mpirun or srun and its options");
    if (!on_path(s.launcher[0]))
      throw ConfigError("--launcher '" + s.launcher[0] + "': no such program in PATH (expected mpirun or srun)");
    s.train_args.assign(job.begin() + 1, job.end());

    // The job's config, checked here before any attempt: a bad key is one line, not a restart.
    po::options_description train_desc;
    train_desc.add_options()("config", po::value<std::string>())("json", po::bool_switch())(
        "plugin-path", po::value<std::vector<std::string>>()->composing())("resume", po::value<std::string>())(
        "allow-unchecked", po::bool_switch());
    const RunCommandLine line = parse_run_command_line("train", s.train_args, train_desc);
    if (!line.error.empty()) throw ConfigError(line.error);
    if (!line.vm.count("config")) throw ConfigError("the job needs --config FILE");
    std::vector<std::string> plugin_paths;
    if (line.vm.count("plugin-path")) plugin_paths = line.vm["plugin-path"].as<std::vector<std::string>>();
    const Config config = resolved_run_config(line.vm["config"].as<std::string>(), line, plugin_paths);
    s.checkpoint_dir = with_job_id(config.get_string("checkpoint.dir"));
    s.metrics_file = with_job_id(metrics_path(config, s.checkpoint_dir));
    if (config.get_string("sync.name") == "param_server" && s.min_nodes < static_cast<int>(s.hosts.size()))
      throw ConfigError(
          "sync.name = param_server cannot go on with fewer nodes (its servers hold the parameters, "
          "and a run resumes only at its own world size): expected --min-nodes " +
          std::to_string(s.hosts.size()) + " (every node) or a lock-step sync strategy, got --min-nodes " +
          std::to_string(s.min_nodes));
    // (A parameter server is never restarted on fewer nodes: the check above.)
    s.fit.global_batch = config.get_int("train.global_batch");
    if (config.has("sync.accum_steps")) s.fit.accumulation = config.get_int("sync.accum_steps");
    if (config.has("sync.deterministic") && config.get_bool("sync.deterministic") && config.has("sync.micro_shards"))
      s.fit.micro_shards = config.get_int("sync.micro_shards");
    if (config.get_int("checkpoint.every_steps") == 0)
      s.say("note: checkpoint.every_steps = 0: a restart begins again from step 0 (set it to lose fewer steps)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgtrain: error: launch: %s\n", e.what());
    return 2;
  }
  struct sigaction forward {};
  forward.sa_handler = forward_stop_signal;
  sigemptyset(&forward.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGUSR1}) sigaction(signal, &forward, nullptr);
  try {
    return s.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgtrain: error: launch: %s\n", e.what());
    return 1;
  }
}

}  // namespace mgt::cli
