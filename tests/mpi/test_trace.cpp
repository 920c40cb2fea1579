// The timeline trace under mpirun: every rank's spans reach rank 0's one file, the bucketed
// all-reduce (the allreduce plugin, loaded from disk) reports each bucket on a track of its own
// in both of its modes, a second thread's spans land on their own track, spans nest on every
// track, nothing is recorded before start() or past the steps traced, and a path that cannot be
// written is refused before, and only warned about after, with every rank finishing.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "loader/plugin_loader.hpp"
#include "mpi_check.hpp"
#include "observers/trace.hpp"

namespace {

namespace fs = std::filesystem;

// Buckets through MPI: on one node the shared memory's update reduces the whole buffer as one.
std::unique_ptr<mgt::SyncStrategy> make_allreduce(mgt::PluginRegistry& registry, bool overlap) {
  mgt::Config config =
      mgt::Config::from_string(std::string("[sync]\nname = allreduce\nbucket_mb = 0.1\nshared_memory = "
                                           "off\noverlap = ") +
                                   (overlap ? "true" : "false") + "\n",
                               "test");
  auto keys = registry.config_keys("sync", "allreduce");
  keys.push_back({"sync.name", mgt::KeyType::string, nullptr, "sync"});
  config.validate(keys);
  return registry.create_sync("allreduce", config);
}

// Three layers' worth of parameters: with 0.1 MB buckets, two buckets.
void fill_store(mgt::ParameterStore& store) {
  store.declare("fc1.weight", {256, 784}, mgt::Init::he_uniform, 784);
  store.declare("fc1.bias", {256}, mgt::Init::zeros, 1);
  store.declare("fc2.weight", {128, 256}, mgt::Init::he_uniform, 256);
  store.declare("fc2.bias", {128}, mgt::Init::zeros, 1);
  store.declare("fc3.weight", {10, 128}, mgt::Init::he_uniform, 128);
  store.declare("fc3.bias", {10}, mgt::Init::zeros, 1);
  store.finalize();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

using mpi_check::check;

int main(int argc, char** argv) {
  mgt::MpiRuntime mpi(&argc, &argv);
  auto comm = mgt::make_mpi_communicator();
  comm->set_timeout_seconds(60);
  const int rank = comm->rank();
  const int ranks = comm->size();
  mgt::PluginRegistry registry;

  // A shared scratch directory, named by rank 0.
  char dir_name[256] = {};
  if (rank == 0) {
    const std::string made = (fs::temp_directory_path() / ("mgtrain-trace-" + std::to_string(::getpid()))).string();
    fs::create_directories(made);
    std::snprintf(dir_name, sizeof dir_name, "%s", made.c_str());
  }
  comm->broadcast(dir_name, sizeof dir_name, 0);
  const fs::path dir = dir_name;
  const std::string path = (dir / "sub" / "trace.json").string();

  // Before step 1: a path that cannot be written names the key, where it was set and why.
  if (rank == 0) {
    const std::string proc =
        error_of([] { mgt::Trace::check_writable("/proc/nope/trace.json", "metrics.trace", "command line"); });
    check(contains(proc, "config key 'metrics.trace' (command line)") && contains(proc, "'/proc/nope/trace.json'") &&
              contains(proc, "cannot create its directory '/proc/nope'"),
          "an unwritable trace path is refused naming the key and the path: " + proc, rank);
    const std::string directory =
        error_of([&] { mgt::Trace::check_writable(dir.string(), "metrics.trace", "run.ini:3"); });
    check(contains(directory, "is a directory, not a regular file"), "a directory is not a trace file: " + directory,
          rank);
    check(error_of([&] { mgt::Trace::check_writable(path, "metrics.trace", "run.ini:3"); }).empty(),
          "a path in a new directory can be written", rank);
    check(fs::is_directory(dir / "sub") && fs::is_empty(dir / "sub"),
          "the check makes the directory and leaves no file in it", rank);
  }
  comm->barrier();

  constexpr int kSteps = 3, kTraced = 2;
  mgt::Trace trace(path, kTraced);
  mgt::TraceBuffer* main = trace.main_thread();
  { mgt::TraceSpan early(main, "before start"); }
  trace.start(*comm);
  comm->set_allreduce_observer(&trace);

  mgt::ParameterStore store;
  fill_store(store);
  auto blocking = make_allreduce(registry, false);
  auto overlapped = make_allreduce(registry, true);
  blocking->setup(*comm, store);
  overlapped->setup(*comm, store);
  // The reader's thread, recording beside the main one (from before the first step on).
  std::atomic<int> reads_done{0};
  std::thread reader([&] {
    for (int i = 0; i < 50; ++i) {
      {
        mgt::TraceSpan read(trace.reader_thread(), "read batch", "batch", i);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      ++reads_done;
    }
  });
  while (reads_done == 0) std::this_thread::yield();
  for (int step = 0; step < kSteps; ++step) {
    trace.at_step(step);
    mgt::SyncStrategy& sync = step % 2 == 0 ? *overlapped : *blocking;
    mgt::TraceSpan step_span(main, "step", "step", step + 1);
    {
      mgt::TraceSpan backward(main, "backward");
      for (size_t h = store.params().size(); h-- > 0;) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // a layer's backward
        sync.gradients_ready({h});
      }
    }
    mgt::TraceSpan sync_span(main, "sync");
    sync.end_backward(0);
  }
  reader.join();
  trace.resume_recording();
  { mgt::TraceSpan checkpoint(main, "checkpoint"); }
  std::ostringstream log;
  trace.write(*comm, true, log);
  comm->set_allreduce_observer(nullptr);

  if (rank == 0) {
    check(contains(log.str(), "trace: " + path), "rank 0 says where the trace is: " + log.str(), rank);
    check(fs::exists(path), "the trace file exists", rank);
    size_t files = 0;
    for (const auto& entry : fs::directory_iterator(dir / "sub")) files += entry.is_regular_file() ? 1 : 0;
    check(files == 1, "no temporary file is left beside the trace", rank);
    nlohmann::json doc;
    try {
      std::ifstream in(path);
      doc = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      check(false, std::string("the trace is JSON: ") + e.what(), rank);
    }
    check(doc.value("displayTimeUnit", "") == "ms", "displayTimeUnit is ms", rank);
    std::set<int> processes;
    std::map<std::pair<int, int64_t>, std::vector<std::pair<double, double>>> tracks;
    std::map<int, int> steps, buckets, reads, checkpoints, early;
    std::map<int, std::set<int64_t>> bucket_tracks;
    std::map<int, int64_t> bucket_bytes;
    for (const auto& e : doc["traceEvents"]) {
      const int pid = e["pid"];
      const int64_t tid = e["tid"];
      const std::string name = e["name"];
      if (e["ph"] == "M") {
        if (name == "process_name") processes.insert(pid);
        continue;
      }
      const double ts = e["ts"], dur = e["dur"];
      tracks[{pid, tid}].push_back({ts, ts + dur});
      if (name == "step") ++steps[pid];
      if (name == "read batch") reads[pid] += tid == mgt::Trace::thread_id(pid, mgt::Trace::kReaderTrack);
      if (name == "checkpoint") ++checkpoints[pid];
      if (name == "before start") ++early[pid];
      if (name == "allreduce") {
        ++buckets[pid];
        bucket_tracks[pid].insert(tid);
        bucket_bytes[pid] += e["args"]["bytes"].get<int64_t>();
      }
    }
    check(static_cast<int>(processes.size()) == ranks, "a named process per rank", rank);
    for (int r = 0; r < ranks; ++r) {
      const std::string who = "rank " + std::to_string(r) + ": ";
      check(steps[r] == kTraced, who + "the traced steps only (" + std::to_string(steps[r]) + ")", rank);
      check(early[r] == 0, who + "nothing recorded before start()", rank);
      check(checkpoints[r] == 1, who + "recording resumes for the end", rank);
      check(reads[r] > 0, who + "the second thread's spans are on the reader's track", rank);
      check(bucket_tracks[r].size() == 2 && buckets[r] == 2 * kTraced,
            who + "two buckets a step, each on its own track (" + std::to_string(buckets[r]) + " spans on " +
                std::to_string(bucket_tracks[r].size()) + " tracks)",
            rank);
      check(bucket_bytes[r] == static_cast<int64_t>(kTraced * store.flat_size() * sizeof(float)),
            who + "the buckets cover the gradient buffer", rank);
    }
    // On each track, two spans are apart or one holds the other.
    for (auto& [track, spans] : tracks) {
      std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : a.second > b.second;
      });
      std::vector<double> open;
      bool nested = true;
      for (const auto& [begin, end] : spans) {
        while (!open.empty() && open.back() <= begin) open.pop_back();
        if (!open.empty() && end > open.back()) nested = false;
        open.push_back(end);
      }
      check(nested, "spans nest on rank " + std::to_string(track.first) + "'s track " + std::to_string(track.second),
            rank);
    }
  }
  comm->barrier();

  // At the end, a trace that cannot be written is a warning: every rank still finishes.
  mgt::Trace lost((dir / "gone" / "trace.json").string(), 1);
  lost.start(*comm);
  { mgt::TraceSpan span(lost.main_thread(), "step"); }
  std::ostringstream quiet;
  lost.write(*comm, true, quiet);
  check(quiet.str().empty(), "nothing said of a trace that was not written", rank);
  comm->barrier();
  if (rank == 0) fs::remove_all(dir);
  return mpi_check::verdict(*comm);
}
