// `mpirun -np N mgtrain doctor`: every rank reports what it would train on (host, node-local
// rank, GPU, its memory, driver and library versions, the MPI library), and rank 0 prints one row
// per rank, how each node's GPUs reach each other (peer-to-peer access, NVLinks up), and a verdict
// naming each problem that would spoil a run before it starts: more ranks on a node than GPUs,
// versions that differ between ranks, a GPU already in use, CUDA that cannot use the GPUs a node
// has, a node whose links to the others are much slower than the rest (measured between one rank
// per node). No GPU at all is the CPU fallback, not a problem; GPUs without peer access are a note.
// Given the run's config (--config), it binds the GPUs as that run would: a parameter server's
// serving ranks take none, so only the training ranks count against a node's GPUs.
#include <mpi.h>
#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/host_name.hpp"
#include "comm/mpi_communicator.hpp"
#include "command_line_config.hpp"
#include "commands.hpp"
#include "device/gpu_binding.hpp"
#include "doctor_links.hpp"
#include "kernels/cuda/nvml.hpp"
#include "loader/plugin_loader.hpp"
#include "mgtrain/error.hpp"
#include "mgtrain/version.hpp"
#include "runtime/plugin_keys.hpp"
#include "runtime/trainer.hpp"

#ifdef MGTRAIN_HAVE_CUDA
#include "kernels/cpu/gemm.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/pointwise.hpp"
#include "kernels/cuda/runtime.hpp"
#endif

namespace po = boost::program_options;

namespace mgt::cli {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// GPUs of one node whose links the report can carry.
constexpr int kMaxNodeGpus = 16;

// Copies into a fixed field, truncated and terminated: the report travels as plain bytes.
template <size_t N>
void set_text(char (&field)[N], const std::string& text) {
  std::snprintf(field, N, "%s", text.c_str());
}

// One rank's findings, gathered to every rank as bytes (no pointers, fixed size).
struct RankReport {
  int32_t rank = 0, local_rank = 0, local_size = 0;
  int32_t built_with_cuda = 0;
  int32_t device_count = 0;  // CUDA devices this rank sees
  // Its place among its node's training ranks; -1 when it serves (a parameter server under
  // --config) and takes no GPU.
  int32_t training_index = 0;
  int32_t device = -1;                                   // the one it would use, training_index % device_count
  int32_t nvml_gpus = -1;                                // GPUs NVML sees on the node; -1: NVML not available
  int32_t driver = 0, runtime = 0, cudnn = 0, nccl = 0;  // CUDA's encodings; 0: unknown
  int32_t kernels_ok = 0;  // 1: a ReLU and an sgemm on the GPU matched the CPU; -1: they failed
  int32_t memory_from_nvml = 0;
  int32_t simulated = 0;                        // set by MGTRAIN_TEST_DOCTOR: no device calls
  int64_t memory_used_before = -1;              // bytes in use on the GPU before this job touched it (NVML)
  int64_t memory_used = -1, memory_total = -1;  // bytes, after this rank's context exists
  char host[64] = {};
  char gpu_name[96] = {};
  char pci_bus_id[32] = {};
  char nvml_driver[32] = {};  // e.g. 570.124.06
  char mpi_library[256] = {};
  char no_gpu_reason[256] = {};
  char error[256] = {};  // a call that failed while looking
  // Local rank 0 only: how its node's GPUs reach each other. peer[i][j] = 1 when GPU i can access
  // GPU j's memory directly (NVLink or PCIe peer-to-peer), 0 when not; nvlinks[i] = NVLinks up on
  // GPU i, -1 when NVML cannot say.
  int32_t node_gpus = 0;
  int8_t peer[kMaxNodeGpus][kMaxNodeGpus] = {};
  int16_t nvlinks[kMaxNodeGpus] = {};
};

bool serves(const RankReport& r) { return r.training_index < 0; }

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string version(text, static_cast<size_t>(std::max(length, 0)));
  while (!version.empty() && (version.back() == '\n' || version.back() == '\0')) version.pop_back();
  return version;
}

// "Open MPI v4.1.4" from "Open MPI v4.1.4, package: Debian OpenMPI, ident: ...".
std::string short_mpi_version(const std::string& full) {
  return full.substr(0, std::min(full.find(','), full.find('\n')));
}

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / kGiB);
  return text;
}

#ifdef MGTRAIN_HAVE_CUDA
// Runs a ReLU and a small sgemm on the current device and compares them with the CPU: catches a
// build without code for this GPU's architecture, or a cuBLAS that does not load or run.
void check_kernels() {
  std::vector<float> x(1024);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  cuda::DeviceBuffer<float> d_x(x), d_y(x.size());
  cuda::relu_forward(d_x.data(), d_y.data(), static_cast<int64_t>(x.size()));
  const auto y = d_y.to_host();
  for (size_t i = 0; i < x.size(); ++i)
    MGT_CHECK(y[i] == std::max(x[i], 0.0f), CudaError,
              "ReLU on the GPU gave " + std::to_string(y[i]) + " for " + std::to_string(x[i]));

  const int n = 16;
  std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 5) - 2.0f;
    b[i] = static_cast<float>(i % 3) - 1.0f;
  }
  cuda::DeviceBuffer<float> d_a(a), d_b(b), d_c(c);
  cuda::BlasHandle blas;
  cuda::sgemm(blas, false, true, n, n, n, 1.0f, d_a.data(), n, d_b.data(), n, 0.0f, d_c.data(), n);
  kernels::sgemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  // Small integers: every product and sum is exact, so the two must be equal.
  MGT_CHECK(d_c.to_host() == c, CudaError, "cuBLAS sgemm on the GPU differs from the CPU GEMM");
}
#endif

// Everything this rank can find out before any rank of the job creates a CUDA context.
RankReport look_before_contexts(const Communicator& comm, const Nvml& nvml, const NodePlace& place) {
  RankReport r;
  r.rank = comm.rank();
  r.local_rank = comm.local_rank();
  r.local_size = comm.local_size();
  r.training_index = place.index;
  set_text(r.host, host_name());
  set_text(r.mpi_library, mpi_library_version());
  if (nvml.ok()) {
    r.nvml_gpus = nvml.device_count();
    set_text(r.nvml_driver, nvml.driver_version());
  }
#ifdef MGTRAIN_HAVE_CUDA
  r.built_with_cuda = 1;
  const auto versions = cuda::library_versions();
  r.driver = versions.driver;
  r.runtime = versions.runtime;
  r.cudnn = versions.cudnn;
  r.nccl = versions.nccl;
  std::string why;
  r.device_count = cuda::device_count(&why);
  if (r.device_count == 0) {
    set_text(r.no_gpu_reason, why);
    return r;
  }
  if (serves(r)) return r;
  r.device = r.training_index % r.device_count;
  try {
    const auto props = cuda::device_properties(r.device);
    set_text(r.gpu_name, props.name);
    set_text(r.pci_bus_id, props.pci_bus_id);
    r.memory_total = props.total_memory;
    Nvml::Memory memory;
    if (nvml.memory(props.pci_bus_id, memory)) {
      r.memory_from_nvml = 1;
      r.memory_used_before = memory.used;
    }
  } catch (const std::exception& e) {
    set_text(r.error, e.what());
  }
#else
  set_text(r.no_gpu_reason, "mgtrain was built without CUDA");
#endif
  return r;
}

#ifdef MGTRAIN_TEST_HOOKS
// Test-only: MGTRAIN_TEST_DOCTOR="R:key=value,...;R:..." (R a rank or *) makes the doctor report
// what it would find on other machines, so the verdicts can be tested without GPUs or a second
// node. Keys: gpus (CUDA devices seen), used_gib (memory in use on the GPU before the job),
// host, mpi (library version text), runtime, driver, cudnn, nccl (CUDA's version encodings),
// p2p (0 or 1: peer access between every two of the node's GPUs, after gpus) and nvlinks (NVLinks
// up on each, after gpus); the last two on a node's local rank 0.
void simulate(RankReport& r) {
  const char* spec = std::getenv("MGTRAIN_TEST_DOCTOR");
  if (!spec || !*spec) return;
  const auto bad = [&](const std::string& why) {
    return ConfigError(std::string("MGTRAIN_TEST_DOCTOR='") + spec + "': " + why +
                       " (expected R:key=value,...;... with R a rank or *)");
  };
  std::stringstream entries(spec);
  std::string entry;
  while (std::getline(entries, entry, ';')) {
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) throw bad("no ':' in '" + entry + "'");
    const std::string who = entry.substr(0, colon);
    if (who != "*" && who != std::to_string(r.rank)) {
      if (who.empty() || who.find_first_not_of("0123456789") != std::string::npos)
        throw bad("'" + who + "' is not a rank");
      continue;
    }
    std::stringstream pairs(entry.substr(colon + 1));
    std::string pair;
    while (std::getline(pairs, pair, ',')) {
      const size_t eq = pair.find('=');
      if (eq == std::string::npos) throw bad("no '=' in '" + pair + "'");
      const std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
      r.simulated = 1;
      try {
        if (key == "gpus") {
          r.device_count = std::stoi(value);
          r.device = r.device_count > 0 && !serves(r) ? r.training_index % r.device_count : -1;
          r.no_gpu_reason[0] = '\0';
          if (r.device < 0) continue;
          set_text(r.gpu_name, "test GPU");
          set_text(r.pci_bus_id, "00000000:0" + std::to_string(r.device % 10) + ":00.0");
          r.memory_total = static_cast<int64_t>(80 * kGiB);
          r.memory_from_nvml = 1;
          r.memory_used_before = std::max<int64_t>(r.memory_used_before, 0);
        } else if (key == "p2p" || key == "nvlinks") {
          if (r.local_rank != 0) continue;
          r.node_gpus = std::min(r.device_count, kMaxNodeGpus);
          for (int i = 0; i < r.node_gpus; ++i) {
            if (key == "nvlinks") {
              r.nvlinks[i] = static_cast<int16_t>(std::stoi(value));
            } else {
              for (int j = 0; j < r.node_gpus; ++j) r.peer[i][j] = i == j || std::stoi(value) != 0 ? 1 : 0;
            }
          }
        } else if (key == "used_gib") {
          r.memory_used_before = static_cast<int64_t>(std::stod(value) * kGiB);
        } else if (key == "host") {
          set_text(r.host, value);
        } else if (key == "mpi") {
          set_text(r.mpi_library, value);
        } else if (key == "runtime") {
          r.runtime = std::stoi(value);
        } else if (key == "driver") {
          r.driver = std::stoi(value);
        } else if (key == "cudnn") {
          r.cudnn = std::stoi(value);
        } else if (key == "nccl") {
          r.nccl = std::stoi(value);
        } else {
          throw bad("unknown key '" + key + "'");
        }
      } catch (const std::logic_error&) {  // stoi/stod on a non-number
        throw bad("'" + value + "' is not a number for " + key);
      }
    }
  }
}
#else
// A build without tests reports only what it finds.
void simulate(RankReport&) {}
#endif

// Local rank 0: which of the node's GPUs reach each other peer-to-peer, and their NVLinks. NCCL
// moves data between GPUs without it through host memory, which slows the all-reduce.
void look_at_links(RankReport& r, const Nvml& nvml) {
#ifdef MGTRAIN_HAVE_CUDA
  if (r.local_rank != 0 || r.device_count < 2 || r.simulated) return;
  r.node_gpus = std::min(r.device_count, kMaxNodeGpus);
  for (int i = 0; i < r.node_gpus; ++i) {
    int links = -1;
    try {
      if (!nvml.nvlinks_active(cuda::device_properties(i).pci_bus_id, links)) links = -1;
    } catch (const std::exception&) {
      links = -1;
    }
    r.nvlinks[i] = static_cast<int16_t>(links);
    for (int j = 0; j < r.node_gpus; ++j) r.peer[i][j] = i == j || cuda::can_access_peer(i, j) ? 1 : 0;
  }
#else
  (void)r;
  (void)nvml;
#endif
}

// Then the rank's own context on its GPU: memory as CUDA sees it, and the kernels run.
void look_on_device(RankReport& r) {
#ifdef MGTRAIN_HAVE_CUDA
  if (r.device < 0 || r.error[0] || r.simulated) return;
  try {
    cuda::set_device(r.device);
    const auto memory = cuda::memory_info();
    r.memory_total = memory.total;
    r.memory_used = memory.total - memory.free;
    check_kernels();
    r.kernels_ok = 1;
  } catch (const std::exception& e) {
    r.kernels_ok = -1;
    set_text(r.error, e.what());
  }
#else
  (void)r;
#endif
}

// "a (ranks 0-3), b (ranks 4, 6)": the ranks of each host, in rank order.
std::string hosts_and_ranks(const std::vector<const RankReport*>& reports) {
  std::map<std::string, std::vector<int>> by_host;
  std::vector<std::string> order;
  for (const auto* r : reports) {
    if (!by_host.count(r->host)) order.push_back(r->host);
    by_host[r->host].push_back(r->rank);
  }
  std::string out;
  for (const auto& host : order) {
    const auto& ranks = by_host[host];
    if (!out.empty()) out += ", ";
    out += host + " (rank" + (ranks.size() > 1 ? "s " : " ");
    const bool contiguous = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
    if (ranks.size() > 2 && contiguous) {
      out += std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
    } else {
      for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
    }
    out += ")";
  }
  return out;
}

struct Verdict {
  std::vector<std::string> problems;  // each spoils a run: exit 1
  std::vector<std::string> notes;     // worth knowing, not wrong
  std::string cpu_fallback;           // why no rank has a GPU; empty when some do
};

// plan: the run's settings under --config (the same on every rank), none without it.
Verdict judge(const std::vector<RankReport>& reports, double busy_gib, const std::optional<RankPlan>& plan) {
  Verdict v;
  // A run on the CPU leaves the GPUs alone, so how they are shared or used is not its problem.
  const bool on_cpu = plan && (plan->device == "cpu" || plan->device == "emulated_gpu");
  if (on_cpu)
    v.notes.push_back("the config trains on the CPU (train.device = " + plan->device +
                      "): the run uses none of the GPUs");
  std::map<std::string, std::vector<const RankReport*>> by_host;
  std::vector<std::string> hosts;
  for (const auto& r : reports) {
    if (!by_host.count(r.host)) hosts.push_back(r.host);
    by_host[r.host].push_back(&r);
  }

  for (const auto& r : reports)
    if (r.error[0])
      v.problems.push_back("rank " + std::to_string(r.rank) + " on " + r.host + ", GPU " + std::to_string(r.device) +
                           ": " + r.error);

  // train.device = gpu: train refuses a training rank without a GPU before step 1, so this is a
  // problem here too, not the CPU fallback.
  if (plan && plan->device == "gpu")
    for (const auto& r : reports)
      if (!serves(r) && r.device < 0)
        v.problems.push_back("rank " + std::to_string(r.rank) + " on " + r.host +
                             ": train.device = gpu, but it has no usable GPU (" +
                             (r.no_gpu_reason[0] ? std::string(r.no_gpu_reason) : std::string("none visible")) +
                             "); train refuses it: set train.device = cpu or auto to train on the CPU");

  // Ranks sharing a GPU. Grouped by PCI address, not CUDA's index: where each rank is given its
  // own GPU (CUDA_VISIBLE_DEVICES per rank, as Slurm does), every rank calls its GPU 0.
  std::vector<const RankReport*> with_gpu, without_gpu;
  for (const auto& r : reports)
    if (!serves(r)) (r.device >= 0 ? with_gpu : without_gpu).push_back(&r);
  for (const auto& host : hosts) {
    const auto& ranks = by_host[host];
    int serving = 0;
    for (const auto* r : ranks) serving += serves(*r) ? 1 : 0;
    const int training = static_cast<int>(ranks.size()) - serving;
    std::map<std::string, std::vector<const RankReport*>> on_gpu;
    std::vector<std::string> order;
    int visible = 0;
    for (const auto* r : ranks) {
      if (r->device < 0) continue;
      visible = std::max(visible, r->device_count);
      const std::string key = r->pci_bus_id[0] ? r->pci_bus_id : "GPU " + std::to_string(r->device);
      if (!on_gpu.count(key)) order.push_back(key);
      on_gpu[key].push_back(r);
    }
    std::string shared;
    for (const auto& key : order) {
      const auto& on = on_gpu[key];
      if (on.size() < 2) continue;
      shared += (shared.empty() ? "" : "; ") + std::string("GPU ") + std::to_string(on[0]->device) + " (" + key +
                ") by ranks";
      for (size_t i = 0; i < on.size(); ++i) shared += (i ? ", " : " ") + std::to_string(on[i]->rank);
    }
    if (shared.empty() || on_cpu) {
      // every training rank has a GPU of its own, or the run trains on none
    } else if (plan && plan->allow_shared_gpu) {
      v.notes.push_back(host + ": ranks share a GPU, as gpu.allow_shared = true allows: " + shared +
                        "; each gets part of its GPU's speed and memory, and they reduce through host "
                        "memory, not NCCL");
    } else {
      const int gpus = std::max(visible, static_cast<int>(order.size()));
      const std::string gpu_count = std::to_string(gpus) + " GPU" + (gpus > 1 ? "s" : "");
      if (serving == 0)
        v.problems.push_back(host + ": " + std::to_string(training) + " ranks but " + gpu_count +
                             ", so ranks share a GPU: " + shared + ". Start at most " + std::to_string(gpus) + " rank" +
                             (gpus > 1 ? "s" : "") + " per node (mpirun --map-by ppr:" + std::to_string(gpus) +
                             ":node)");
      else  // the serving ranks take no GPU, so the advice counts the training ranks
        v.problems.push_back(host + ": " + std::to_string(training) + " training ranks (and " +
                             std::to_string(serving) + " serving, without a GPU) but " + gpu_count +
                             ", so ranks share a GPU: " + shared + ". Start at most " + std::to_string(gpus) +
                             " training rank" + (gpus > 1 ? "s" : "") + " per node");
    }
    // GPUs the driver shows but CUDA cannot use (a driver older than the CUDA runtime, say).
    int nvml_gpus = -1;
    for (const auto* r : ranks) nvml_gpus = std::max(nvml_gpus, r->nvml_gpus);
    if (visible == 0 && nvml_gpus > 0) {
      const std::string count = std::to_string(nvml_gpus) + " GPU" + (nvml_gpus > 1 ? "s" : "");
      if (ranks.front()->built_with_cuda)
        v.problems.push_back(host + ": the driver shows " + count +
                             " but CUDA cannot use them: " + ranks.front()->no_gpu_reason);
      else
        v.notes.push_back(host + " has " + count + " but mgtrain was built without CUDA (cmake -DMGTRAIN_CUDA=ON)");
    }
  }
  if (!with_gpu.empty() && !without_gpu.empty())
    v.problems.push_back("ranks without a usable GPU would train on the CPU beside ranks on GPUs: " +
                         hosts_and_ranks(without_gpu) + " (" + without_gpu.front()->no_gpu_reason + ")");

  // Versions: every rank must run the same ones.
  struct Field {
    const char* what;
    std::string (*value)(const RankReport&);
  };
  const Field fields[] = {
      {"mgtrain's CUDA support",
       [](const RankReport& r) { return std::string(r.built_with_cuda ? "built with CUDA" : "built without CUDA"); }},
      {"NVIDIA driver", [](const RankReport& r) { return std::string(r.nvml_driver); }},
#ifdef MGTRAIN_HAVE_CUDA
      {"CUDA version of the driver",
       [](const RankReport& r) {
         return r.device_count > 0 ? "CUDA " + cuda::cuda_version_string(r.driver) : std::string();
       }},
      {"CUDA runtime", [](const RankReport& r) { return cuda::cuda_version_string(r.runtime); }},
      {"cuDNN", [](const RankReport& r) { return cuda::cudnn_version_string(r.cudnn); }},
      {"NCCL", [](const RankReport& r) { return cuda::nccl_version_string(r.nccl); }},
#endif
      {"MPI library", [](const RankReport& r) { return std::string(r.mpi_library); }},
  };
  for (const auto& field : fields) {
    std::map<std::string, std::vector<const RankReport*>> by_value;
    std::vector<std::string> values;
    for (const auto& r : reports) {
      const std::string value = field.value(r);
      if (value.empty()) continue;  // not known on that rank (no GPU): nothing to compare
      if (!by_value.count(value)) values.push_back(value);
      by_value[value].push_back(&r);
    }
    if (values.size() < 2) continue;
    // The MPI library's full text is long; its first part is shown when that tells them apart.
    std::set<std::string> shorts;
    for (const auto& value : values) shorts.insert(short_mpi_version(value));
    const bool shorten = shorts.size() == values.size();
    std::string text = std::string(field.what) + " differs between ranks: ";
    for (size_t i = 0; i < values.size(); ++i)
      text += (i ? "; " : "") + (shorten ? short_mpi_version(values[i]) : values[i]) + " on " +
              hosts_and_ranks(by_value[values[i]]);
    v.problems.push_back(text);
  }

  // A GPU already in use by another job: memory used before any rank of this job created a
  // context (NVML), or failing that, what CUDA reports less this job's own contexts (an
  // allowance of 1 GiB per rank on that GPU).
  std::map<std::pair<std::string, int>, int> ranks_per_gpu;
  for (const auto& r : reports)
    if (r.device >= 0) ++ranks_per_gpu[{r.host, r.device}];
  std::set<std::pair<std::string, int>> reported;
  for (const auto& r : reports) {
    if (on_cpu || r.device < 0 || !reported.insert({r.host, r.device}).second) continue;
    const std::string gpu =
        std::string(r.host) + " GPU " + std::to_string(r.device) + " (" + r.gpu_name + ", " + r.pci_bus_id + ")";
    if (r.memory_from_nvml && r.memory_used_before > busy_gib * kGiB) {
      v.problems.push_back(gpu + " is busy: " + gib(r.memory_used_before) + " GiB of " + gib(r.memory_total) +
                           " GiB in use by other processes before this job "
                           "started (threshold " +
                           gib(static_cast<int64_t>(busy_gib * kGiB)) + " GiB, --busy-gib)");
    } else if (!r.memory_from_nvml && r.memory_used >= 0) {
      const int own = ranks_per_gpu[{r.host, r.device}];
      const double others = r.memory_used / kGiB - own;
      if (others > busy_gib)
        v.problems.push_back(gpu + " looks busy: " + gib(r.memory_used) + " GiB in use with " + std::to_string(own) +
                             " rank(s) of this job on it (cudaMemGetInfo; "
                             "NVML, which tells other processes apart, is not available)");
    }
  }

  // GPUs of a node that cannot reach each other directly: worth knowing, not wrong.
  for (const auto& r : reports) {
    std::string pairs;
    for (int i = 0; i < r.node_gpus; ++i)
      for (int j = i + 1; j < r.node_gpus; ++j)
        if (!r.peer[i][j] || !r.peer[j][i])
          pairs += (pairs.empty() ? "" : ", ") + std::to_string(i) + "-" + std::to_string(j);
    if (!pairs.empty())
      v.notes.push_back(std::string(r.host) + ": GPU pairs without peer-to-peer access: " + pairs +
                        "; NCCL moves their data through host memory, which slows the all-reduce "
                        "(nvidia-smi topo -m shows the topology)");
  }

  // No CPU fallback where the config asks for GPUs: the problems above say what train does.
  if (with_gpu.empty() && !without_gpu.empty() && !(plan && plan->device == "gpu"))
    v.cpu_fallback = without_gpu.front()->no_gpu_reason;
  return v;
}

// The job's nodes in the order of their first rank, and the rank that measures for each (its
// local rank 0).
struct JobNodes {
  std::vector<std::string> hosts;
  std::vector<int> leaders;
};

JobNodes job_nodes(const std::vector<RankReport>& reports) {
  JobNodes nodes;
  std::map<std::string, size_t> index;  // host -> its place in nodes
  for (const auto& r : reports) {
    const auto [it, added] = index.emplace(r.host, nodes.hosts.size());
    if (added) {
      nodes.hosts.push_back(r.host);
      nodes.leaders.push_back(r.rank);  // its first rank, unless one is local rank 0
    } else if (r.local_rank == 0) {
      nodes.leaders[it->second] = r.rank;
    }
  }
  return nodes;
}

void print_report(const std::vector<RankReport>& reports, const Verdict& verdict, const std::vector<NodeLink>& links,
                  const JobNodes& nodes) {
  std::set<std::string> hosts;
  for (const auto& r : reports) hosts.insert(r.host);
  const auto& first = reports.front();
  std::string build = "built without CUDA";
#ifdef MGTRAIN_HAVE_CUDA
  const auto compiled = cuda::compiled_versions();
  build = "built with CUDA " + cuda::cuda_version_string(compiled.runtime) + ", cuDNN " +
          cuda::cudnn_version_string(compiled.cudnn) + ", NCCL " + cuda::nccl_version_string(compiled.nccl);
#endif
  std::printf("mgtrain %s doctor: %zu rank%s on %zu node%s; %s\n", MGTRAIN_VERSION, reports.size(),
              reports.size() > 1 ? "s" : "", hosts.size(), hosts.size() > 1 ? "s" : "", build.c_str());

  std::vector<std::vector<std::string>> rows = {
      {"RANK", "HOST", "LOCAL", "GPU", "MEMORY USED/TOTAL", "DRIVER", "CUDA", "CUDNN", "NCCL", "MPI"}};
  for (const auto& r : reports) {
    std::string gpu = "-", memory = "-", driver = "-", runtime = "-", cudnn = "-", nccl = "-";
    if (r.device >= 0) {
      gpu = std::to_string(r.device) + ": " + r.gpu_name + " " + r.pci_bus_id;
      if (r.kernels_ok < 0) gpu += " (failed)";
    } else if (serves(r)) {
      gpu = "- (serves)";
    }
    const int64_t used = r.memory_from_nvml ? r.memory_used_before : r.memory_used;
    if (used >= 0 && r.memory_total > 0)
      memory = gib(used) + "/" + gib(r.memory_total) + " GiB" + (r.memory_from_nvml ? "" : " *");
#ifdef MGTRAIN_HAVE_CUDA
    if (r.driver > 0) driver = "CUDA " + cuda::cuda_version_string(r.driver);
    runtime = cuda::cuda_version_string(r.runtime);
    cudnn = cuda::cudnn_version_string(r.cudnn);
    nccl = cuda::nccl_version_string(r.nccl);
#endif
    if (r.nvml_driver[0]) driver = std::string(r.nvml_driver) + (driver == "-" ? "" : " (" + driver + ")");
    rows.push_back({std::to_string(r.rank), r.host, std::to_string(r.local_rank) + "/" + std::to_string(r.local_size),
                    gpu, memory, driver, runtime, cudnn, nccl, short_mpi_version(r.mpi_library)});
  }
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
  bool nvml_memory = false, cuda_memory = false;
  for (const auto& r : reports) {
    nvml_memory |= r.memory_from_nvml != 0;
    cuda_memory |= !r.memory_from_nvml && r.memory_used >= 0;
  }
  if (nvml_memory) std::printf("memory: in use on the GPU before this job started (NVML)\n");
  if (cuda_memory) std::printf("* memory from cudaMemGetInfo, including this job's contexts (NVML not available)\n");
  std::printf("MPI library: %s\n", first.mpi_library);
  std::vector<const RankReport*> serving;
  for (const auto& r : reports)
    if (serves(r)) serving.push_back(&r);
  if (!serving.empty())
    std::printf("serving ranks (the sync strategy's servers; no GPU, they update on the CPU): %s\n",
                hosts_and_ranks(serving).c_str());
  for (const auto& r : reports) {
    if (r.node_gpus < 2) continue;
    std::printf("GPU links on %s:\n", r.host);
    for (int i = 0; i < r.node_gpus; ++i) {
      std::string reach, unreachable;
      for (int j = 0; j < r.node_gpus; ++j) {
        if (j == i) continue;
        std::string& list = r.peer[i][j] ? reach : unreachable;
        list += (list.empty() ? "" : ", ") + std::to_string(j);
      }
      std::string line = "  GPU " + std::to_string(i) + ": ";
      if (!reach.empty()) line += "peer access to " + reach;
      if (!unreachable.empty()) line += (reach.empty() ? "" : "; ") + std::string("no peer access to ") + unreachable;
      line += r.nvlinks[i] >= 0 ? "; " + std::to_string(r.nvlinks[i]) + " NVLinks up" : "; NVLinks unknown";
      std::printf("%s\n", line.c_str());
    }
  }

  print_node_links(links, nodes.hosts);

  const std::string fallback =
      verdict.cpu_fallback.empty()
          ? std::string()
          : "CPU fallback: no usable GPU on any node, so each rank trains on the CPU (" + verdict.cpu_fallback + ")";
  if (verdict.problems.empty()) {
    std::printf("verdict: OK%s%s\n", fallback.empty() ? "" : ", ", fallback.c_str());
  } else {
    std::printf("verdict: %zu problem%s:\n", verdict.problems.size(), verdict.problems.size() > 1 ? "s" : "");
    for (const auto& p : verdict.problems) std::printf("  - %s\n", p.c_str());
    if (!fallback.empty()) std::printf("note: %s\n", fallback.c_str());
  }
  for (const auto& n : verdict.notes) std::printf("note: %s\n", n.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_doctor(int argc, char** argv, const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: mpirun -np N mgtrain doctor [--busy-gib G] [--config FILE [--section.key=value ...]]\n"
      "Launched like training. Each rank reports its host, node-local rank, GPU and its memory,\n"
      "driver, CUDA runtime, cuDNN, NCCL and MPI library versions; rank 0 prints a row per rank,\n"
      "the peer-to-peer access and NVLinks between each node's GPUs, the bandwidth and latency between nodes,\n"
      "and a verdict naming each problem: more ranks on a node than GPUs, versions differing\n"
      "between ranks, a GPU in use by another job, GPUs that CUDA cannot use, a node whose links\n"
      "are much slower than the others'. No GPU at all is\n"
      "the CPU fallback. Given the run's config, GPUs are bound as that run would bind them: a\n"
      "parameter server's serving ranks take none; the config and the data are checked as the run\n"
      "checks them before step 1. Exits 0 when nothing is wrong, 1 when something is, 2 when the\n"
      "config or the data is.\noptions");
  desc.add_options()("help", "show this help")(
      "busy-gib", po::value<double>()->default_value(1.0),
      "a GPU with more memory than this in use by other processes counts as busy")(
      "config", po::value<std::string>(), "the run's INI file (and --section.key=value overrides)")(
      "plugin-path", po::value<std::vector<std::string>>()->composing(), "extra plugin directory (repeatable)");
  // Errors in the command line are raised once MPI is up (agree): rank 0 alone reports them.
  RunCommandLine command_line = parse_run_command_line("doctor", args, desc);
  const po::variables_map& vm = command_line.vm;
  if (command_line.error.empty()) {
    auto overrides = command_line.overrides;
    for (const auto& arg : po::collect_unrecognized(command_line.parsed->options, po::include_positional))
      overrides.push_back(arg);
    if (!vm.count("config") && !overrides.empty())
      command_line.error = "doctor: unexpected argument '" + overrides.front() +
                           "' (config overrides need --config FILE) (see mgtrain doctor --help)";
    else if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    } else if (!(vm["busy-gib"].as<double>() >= 0.0)) {
      command_line.error = "doctor: --busy-gib must be >= 0";
    }
  }

  if (refuse_low_open_file_limit()) return 2;
  MpiRuntime mpi(&argc, &argv);
  auto comm = make_mpi_communicator();
  try {
    agree(*comm, [&] {
      if (!command_line.error.empty()) throw ConfigError(command_line.error);
    });
    const double busy_gib = vm["busy-gib"].as<double>();
    // This rank's role in the run, and so its place among the training ranks of its node.
    std::optional<RankPlan> plan;
    if (vm.count("config")) {
      const std::vector<std::string> plugin_paths =
          vm.count("plugin-path") ? vm["plugin-path"].as<std::vector<std::string>>() : std::vector<std::string>{};
      Config config;
      double timeout_s = comm->timeout_seconds();
      agree(*comm, [&] {
        std::string note;
        config = checked_run_config(vm["config"].as<std::string>(), command_line, plugin_paths, &note, &timeout_s);
      });
      comm->set_timeout_seconds(timeout_s);
      agree(*comm, [&] { plan = plan_rank(*comm, std::move(config), plugin_paths); });
    }
    const NodePlace place = gather_training_place(*comm, !plan || plan->trains);
    Nvml nvml;
    RankReport mine = look_before_contexts(*comm, nvml, place);
    simulate(mine);
    // Every rank reads GPU memory through NVML before any creates its own context, so what it
    // sees in use belongs to other jobs.
    comm->barrier();
    look_on_device(mine);
    look_at_links(mine, nvml);
    std::vector<RankReport> reports(static_cast<size_t>(comm->size()));
    comm->allgather(&mine, reports.data(), sizeof(RankReport));
    // Across nodes, the links between them: one rank per node measures, pair by pair. Not between
    // simulated hosts (MGTRAIN_TEST_DOCTOR), which are processes on one machine.
    const JobNodes nodes = job_nodes(reports);
    const bool simulated = std::any_of(reports.begin(), reports.end(), [](const auto& r) { return r.simulated != 0; });
    const std::vector<NodeLink> links =
        nodes.hosts.size() > 1 && !simulated ? measure_node_links(*comm, nodes.leaders) : std::vector<NodeLink>{};
    // Every rank holds every report, so all reach the same verdict and exit code unprompted.
    Verdict verdict = judge(reports, busy_gib, plan);
    for (auto& problem : judge_node_links(links, nodes.hosts)) verdict.problems.push_back(std::move(problem));
    if (comm->rank() == 0) print_report(reports, verdict, links, nodes);
    return verdict.problems.empty() ? 0 : 1;
  } catch (const StartupError& e) {
    // Every rank got here together (a bad config); the first that found it says it.
    if (e.report()) std::fprintf(stderr, "mgtrain: error: [rank %d] %s\n", comm->rank(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mgtrain: error: [rank %d] %s\n", comm->rank(), printable(e.what()).c_str());
    std::fflush(stderr);
    // Another rank may be waiting in a collective for this one.
    if (comm->size() > 1) comm->abort(1);
    return 1;
  }
}

}  // namespace mgt::cli
