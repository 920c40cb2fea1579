#pragma once
// The timeline trace (metrics.trace): what each rank spent its time on, as spans with a begin and
// an end, written at the run's end as one Chrome/Perfetto JSON trace (ui.perfetto.dev,
// chrome://tracing) with a process per rank and a track per thread that records: the main thread
// (step, data wait, forward, backward, sync, optimizer, checkpoint, evaluation, metrics), the data
// reader's prefetch thread, and one track per all-reduce bucket, drawn beside backward.
//
// Each recording thread has a TraceBuffer of fixed size that only it writes, so a span costs two
// clock reads and a store, no lock and no allocation; a run without a trace has no Trace and every
// span is a null-pointer check. At the start the ranks align their clocks on rank 0's; at the end
// rank 0 gathers every rank's spans and writes one file, under a temporary name then renamed.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "mgtrain/communicator.hpp"

namespace mgt {

class Trace;

// One thread's spans. `name` and `arg_name` must outlive the trace (string literals): only the
// pointers are kept. Past its capacity, or once the trace stops recording, spans are counted, not
// kept.
class TraceBuffer {
 public:
  using Clock = std::chrono::steady_clock;
  TraceBuffer(const Trace& trace, size_t capacity, int track);
  // A span of this buffer's thread; `track` < 0 is the buffer's own track.
  void record(const char* name, Clock::time_point begin, Clock::time_point end, const char* arg_name = nullptr,
              int64_t arg = 0, int track = -1);

 private:
  friend class Trace;
  // Plain data, so that the buffer's pages are touched only as spans fill them.
  struct Event {
    const char* name;
    const char* arg_name;  // null: no argument
    int64_t arg;
    int64_t begin_ns, end_ns;  // this rank's steady clock
    int track;
  };
  const Trace& trace_;
  std::unique_ptr<Event[]> events_;
  size_t capacity_;
  int track_;
  // Written by the buffer's thread only; read by the writer at the end, which sees the events
  // published before `size_` (release, acquire).
  std::atomic<size_t> size_{0};
  std::atomic<int64_t> dropped_{0};
};

// A span of the calling thread from construction to end() (or destruction); nothing when the
// buffer is null, the trace being off.
class TraceSpan {
 public:
  TraceSpan(TraceBuffer* buffer, const char* name, const char* arg_name = nullptr, int64_t arg = 0)
      : buffer_(buffer), name_(name), arg_name_(arg_name), arg_(arg) {
    if (buffer_) begin_ = TraceBuffer::Clock::now();
  }
  ~TraceSpan() { end(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  void end() {
    if (!buffer_) return;
    buffer_->record(name_, begin_, TraceBuffer::Clock::now(), arg_name_, arg_);
    buffer_ = nullptr;
  }

 private:
  TraceBuffer* buffer_;
  const char* name_;
  const char* arg_name_;
  int64_t arg_;
  TraceBuffer::Clock::time_point begin_;
};

class Trace final : public AllreduceObserver {
 public:
  // Spans kept per thread at most: 48 bytes each, memory taken only as they fill it.
  static constexpr size_t kSpansPerThread = size_t{1} << 20;
  // Track ids (the trace's "tid"): the main thread, the reader's thread, then bucket k's at
  // kFirstBucketTrack + k.
  static constexpr int kMainTrack = 0, kReaderTrack = 1, kFirstBucketTrack = 2;
  // A track's thread id in the trace: unique over all ranks, as readers take thread ids to be (a
  // thread id seen again under another process is taken for a thread that moved).
  static int64_t thread_id(int rank, int track) { return (rank + int64_t{1}) * 100000 + track; }

  // Whether `path` can be written: its directory is created where missing, and a file is created
  // there and removed. Throws IoError naming `key` (as `source` set it) and the path, and why not.
  static void check_writable(const std::string& path, const std::string& key, const std::string& source);

  // A trace to `path` of the first `steps` steps of the run; it records nothing until start().
  Trace(std::string path, int64_t steps);
  ~Trace() override;

  // Every rank of `comm` together: each rank's clock offset from rank 0's (the best of a few
  // round trips), so that the trace's times are rank 0's from here; recording starts.
  void start(Communicator& comm);
  // At the start of each step, counted from the run's first: past the last step traced, nothing
  // more is recorded until resume_recording() (the final checkpoint and evaluation).
  void at_step(int64_t steps_run) {
    if (steps_run >= steps_) recording_.store(false, std::memory_order_relaxed);
  }
  void resume_recording() { recording_.store(started_, std::memory_order_relaxed); }
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

  TraceBuffer* main_thread() { return &main_; }
  TraceBuffer* reader_thread() { return &reader_; }

  // AllreduceObserver: a bucket's span on its own track, from its start until this rank saw it
  // complete. Recorded by the main thread.
  void bucket_started(size_t bucket, size_t bytes) override;
  void bucket_finished(size_t bucket) override;

  // Every rank of `comm` together (all = false: this rank alone, when some ranks are gone):
  // rank 0 gathers every rank's spans and writes the file. A file that cannot be written is a
  // warning on stderr; the run's other results stand. Rank 0 says on `log` where the trace is.
  void write(Communicator& comm, bool all, std::ostream& log);

  // This rank's spans as JSON trace events of process `rank`, its metadata first, separated by
  // ",\n" (exposed for tests).
  std::string events_json(int rank, const std::string& host) const;

 private:
  std::string path_;
  int64_t steps_;
  std::atomic<bool> recording_{false};
  bool started_ = false;
  int64_t start_ns_ = 0;  // rank 0's clock at start(), as this rank's clock reads it: the trace's 0
  TraceBuffer main_, reader_;
  std::vector<TraceBuffer::Clock::time_point> bucket_begin_;
  std::vector<size_t> bucket_bytes_;
};

}  // namespace mgt
