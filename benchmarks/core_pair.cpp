// What two cores of this machine do to each other, sampled over time: the figures behind the
// shared update's cache-line handling (kernels/cpu/cache_lines.hpp) and behind the spread of
// `mgtrain bench` at np=2 on a virtual machine whose host moves its virtual CPUs around.
//
// Every sample, with one thread pinned to each CPU:
//   - the round trip of one cache line between the two (ns): tens of ns within a core complex,
//     hundreds between two;
//   - compute on both at once against one alone (a multiply-add loop): 1.0 on two cores, up to
//     2.0 where the host runs both virtual CPUs on one physical core;
//   - writing a buffer (the MLP's half of the parameters, 470 KB) that the other core has just
//     read: plain stores, stores with the lines evicted two 4 KB blocks ahead (the shared update),
//     non-temporal stores (kernels::stream_copy); and reading a buffer the other core streamed;
//   - plain stores into that buffer once the other core has read it and then 4 MB of other data,
//     about what a rank of the MLP reads in a step: the shared update's gradient slots, in two
//     sets, are written again that much later after another rank summed from them
//     (core/src/sdk/slot_writes.hpp).
// Prints each sample (with --samples) and then the medians, split by the round trip.
//
// Built and run by benchmarks/core_pair.sh; x86-64 only (the cache-line instructions).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cache_lines.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double microseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    std::fprintf(stderr, "core_pair: cannot run on CPU %d\n", cpu);
    std::exit(2);
  }
}

// The other thread, on the second CPU, runs what the first posts and says when it is done.
enum class Op : int { none, ping_pong, compute, read, read_then_other, stream, quit };

struct alignas(64) Line {
  std::atomic<long> value{0};
};

Line g_post, g_done, g_ball;  // a line each: posting and the ping-pong must not share one
std::atomic<Op> g_op{Op::none};

constexpr long kRoundTrips = 20000;
constexpr size_t kFloats = 470 * 1024 / sizeof(float);
float* g_buffer = nullptr;  // the region both cores touch
float* g_source = nullptr;  // what the writer stores, its own
constexpr size_t kOtherFloats = (size_t{4} << 20) / sizeof(float);
float* g_other = nullptr;  // read by the other core after the region, pushing it out of its caches
volatile float g_sink = 0;

// A multiply-add chain per vector, ten vectors: bound by the core's arithmetic, not its memory.
double compute() {
  using Floats = float __attribute__((vector_size(32)));
  Floats x[10];
  for (int k = 0; k < 10; ++k) x[k] = Floats{} + (1.0f + k * 1e-3f);
  const Floats m = Floats{} + 0.9999f, c = Floats{} + 1e-4f;
  const auto start = Clock::now();
  for (long i = 0; i < 1000000; ++i)
    for (auto& v : x) v = v * m + c;
  float sum = 0;
  for (auto& v : x)
    for (int j = 0; j < 8; ++j) sum += v[j];
  g_sink = sum;
  return microseconds_since(start);
}

void read_buffer() {
  float sum = 0;
  for (size_t i = 0; i < kFloats; i += 16) sum += g_buffer[i] + g_buffer[i + 8];
  g_sink = sum;
}

// The region, then the other data.
void read_buffer_then_other() {
  read_buffer();
  float sum = 0;
  for (size_t i = 0; i < kOtherFloats; i += 16) sum += g_other[i];
  g_sink = sum;
}

void write_plain() {
  for (size_t i = 0; i < kFloats; ++i) g_buffer[i] = g_source[i] + 1.0f;
}

// As the shared update stores the parameters: each 4 KB block's lines evicted two blocks ahead.
void write_evicting() {
  constexpr size_t kBlock = 1024, kAhead = 2;
  mgt::kernels::evict_lines(g_buffer, kAhead * kBlock * sizeof(float));
  for (size_t at = 0; at < kFloats; at += kBlock) {
    const size_t ahead = at + kAhead * kBlock;
    if (ahead < kFloats) mgt::kernels::evict_lines(g_buffer + ahead, std::min(kBlock, kFloats - ahead) * sizeof(float));
    for (size_t i = at; i < std::min(at + kBlock, kFloats); ++i) g_buffer[i] = g_source[i] + 1.0f;
  }
}

void stream() {
  mgt::kernels::stream_copy(g_buffer, g_source, kFloats);
  mgt::kernels::stream_fence();
}

void helper(int cpu) {
  pin(cpu);
  for (long seen = 0;;) {
    // Asleep between requests, as a rank's core is while the other runs alone.
    g_post.value.wait(seen, std::memory_order_acquire);
    ++seen;
    switch (g_op.load()) {
      case Op::ping_pong:
        for (long i = 0; i < kRoundTrips; ++i) {
          while (g_ball.value.load(std::memory_order_acquire) != 2 * i + 1) {
          }
          g_ball.value.store(2 * i + 2, std::memory_order_release);
        }
        break;
      case Op::compute:
        compute();
        break;
      case Op::read:
        read_buffer();
        break;
      case Op::read_then_other:
        read_buffer_then_other();
        break;
      case Op::stream:
        stream();
        break;
      case Op::quit:
        return;
      default:
        break;
    }
    g_done.value.store(seen, std::memory_order_release);
  }
}

long g_posted = 0;
void post(Op op) {
  g_op.store(op);
  g_post.value.store(++g_posted, std::memory_order_release);
  g_post.value.notify_one();
}
void wait_done() {
  while (g_done.value.load(std::memory_order_acquire) != g_posted) {
  }
}
void on_other(Op op) {
  post(op);
  wait_done();
}

double round_trip_ns() {
  g_ball.value.store(0);
  post(Op::ping_pong);
  const auto start = Clock::now();
  for (long i = 0; i < kRoundTrips; ++i) {
    g_ball.value.store(2 * i + 1, std::memory_order_release);
    while (g_ball.value.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const double us = microseconds_since(start);
  wait_done();
  return us * 1e3 / kRoundTrips;
}

// Both at once, against this core alone just before.
double compute_slowdown() {
  const double alone = compute();
  post(Op::compute);
  const double both = compute();
  wait_done();
  return both / alone;
}

template <typename F>
double timed(Op before, F&& f) {
  on_other(before);
  const auto start = Clock::now();
  f();
  return microseconds_since(start);
}

struct Sample {
  double round_trip, slowdown, plain, evicting, streamed, read_streamed, plain_later;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void summary(const char* what, const std::vector<Sample>& samples) {
  if (samples.empty()) return;
  auto col = [&](double Sample::*field) {
    std::vector<double> v;
    for (const Sample& s : samples) v.push_back(s.*field);
    return median(v);
  };
  std::printf(
      "%-28s %5zu samples: round trip %4.0f ns, compute slowdown %.2f; writing what the other read: plain "
      "%4.0f us, evicting %4.0f us, streamed %4.0f us; reading what it streamed %4.0f us; plain stores "
      "after 4 MB more %4.0f us\n",
      what, samples.size(), col(&Sample::round_trip), col(&Sample::slowdown), col(&Sample::plain),
      col(&Sample::evicting), col(&Sample::streamed), col(&Sample::read_streamed), col(&Sample::plain_later));
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 20;
  int cpu_a = 0, cpu_b = 1;
  bool print_samples = false;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--samples")
      print_samples = true;
    else
      positional.emplace_back(argv[i]);
  }
  if (positional.size() > 0) seconds = std::atof(positional[0].c_str());
  if (positional.size() > 2) {
    cpu_a = std::atoi(positional[1].c_str());
    cpu_b = std::atoi(positional[2].c_str());
  }
  if (seconds <= 0 || cpu_a == cpu_b) {
    std::fprintf(stderr, "usage: core_pair [SECONDS=20 [CPU_A=0 CPU_B=1]] [--samples]\n");
    return 2;
  }
  pin(cpu_a);
  g_buffer = static_cast<float*>(std::aligned_alloc(64, kFloats * sizeof(float)));
  g_source = static_cast<float*>(std::aligned_alloc(64, kFloats * sizeof(float)));
  std::fill(g_buffer, g_buffer + kFloats, 0.0f);
  std::fill(g_source, g_source + kFloats, 1.0f);
  g_other = static_cast<float*>(std::aligned_alloc(64, kOtherFloats * sizeof(float)));
  std::fill(g_other, g_other + kOtherFloats, 1.0f);
  std::thread other(helper, cpu_b);

  std::vector<Sample> samples;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    Sample s{};
    s.round_trip = round_trip_ns();
    s.slowdown = compute_slowdown();
    s.plain = timed(Op::read, write_plain);
    s.evicting = timed(Op::read, write_evicting);
    s.streamed = timed(Op::read, stream);
    s.read_streamed = timed(Op::stream, read_buffer);
    s.plain_later = timed(Op::read_then_other, write_plain);
    if (print_samples)
      std::printf(
          "round trip %.0f ns, slowdown %.2f, plain %.0f us, evicting %.0f us, streamed %.0f us, read %.0f us, "
          "plain later %.0f us\n",
          s.round_trip, s.slowdown, s.plain, s.evicting, s.streamed, s.read_streamed, s.plain_later);
    samples.push_back(s);
  }
  post(Op::quit);
  other.join();

  // A round trip past 200 ns crosses between core complexes; a slowdown past 1.25 is two virtual
  // CPUs on one physical core.
  std::vector<Sample> near, far, shared;
  for (const Sample& s : samples) {
    (s.round_trip > 200 ? far : near).push_back(s);
    if (s.slowdown > 1.25) shared.push_back(s);
  }
  std::printf("CPUs %d and %d, %.0f s\n", cpu_a, cpu_b, seconds);
  summary("all", samples);
  summary("round trip <= 200 ns", near);
  summary("round trip > 200 ns", far);
  summary("compute slowdown > 1.25", shared);
  return 0;
}
