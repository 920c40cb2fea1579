#include "observers/trace.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string_view>

#include "base/atomic_file.hpp"
#include "base/host_name.hpp"
#include "mgtrain/error.hpp"

namespace mgt {

namespace fs = std::filesystem;

namespace {

int64_t nanoseconds(TraceBuffer::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int64_t now_ns() { return nanoseconds(TraceBuffer::Clock::now()); }

// A JSON string's body: the names are literals and a host name, but a host name is not ours.
std::string json_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", byte);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

// Microseconds with three decimals (nanoseconds), as trace events count time.
std::string microseconds(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ns) / 1e3);
  return text;
}

}  // namespace

TraceBuffer::TraceBuffer(const Trace& trace, size_t capacity, int track)
    : trace_(trace), events_(new Event[capacity]), capacity_(capacity), track_(track) {}

void TraceBuffer::record(const char* name, Clock::time_point begin, Clock::time_point end, const char* arg_name,
                         int64_t arg, int track) {
  if (!trace_.recording()) return;
  const size_t n = size_.load(std::memory_order_relaxed);
  if (n == capacity_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  events_[n] = {name, arg_name, arg, nanoseconds(begin), nanoseconds(end), track < 0 ? track_ : track};
  size_.store(n + 1, std::memory_order_release);
}

void Trace::check_writable(const std::string& path, const std::string& key, const std::string& source) {
  const std::string what = "config key '" + key + "' (" + source + "): the trace";
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::is_directory(path, ec)) {
    fs::create_directories(dir, ec);
    if (ec)
      throw IoError(what + " '" + path + "' cannot be written: cannot create its directory '" + dir.string() +
                    "': " + ec.message());
  }
  // The trace is written under a temporary name beside it at the end, then renamed: make one now
  // (and remove it) rather than find out after the training.
  AtomicFile probe(path, what);
}

Trace::Trace(std::string path, int64_t steps)
    : path_(std::move(path)),
      steps_(steps),
      main_(*this, kSpansPerThread, kMainTrack),
      reader_(*this, kSpansPerThread, kReaderTrack) {}

Trace::~Trace() = default;

void Trace::start(Communicator& comm) {
  // Rank r's offset from rank 0 by round trips, the shortest one's: a rank's clock read halfway
  // through it is taken to be simultaneous with rank 0's reply. The steady clocks of one node
  // agree already; those of different nodes start at each one's boot.
  constexpr int kTag = 97, kRounds = 8;
  int64_t offset = 0;
  for (int r = 1; r < comm.size(); ++r) {
    if (comm.rank() == 0) {
      for (int i = 0; i < kRounds; ++i) {
        int64_t ping = 0;
        comm.recv(&ping, sizeof ping, r, kTag);
        const int64_t reply = now_ns();
        comm.send(&reply, sizeof reply, r, kTag);
      }
    } else if (comm.rank() == r) {
      int64_t shortest = INT64_MAX;
      for (int i = 0; i < kRounds; ++i) {
        const int64_t sent = now_ns();
        comm.send(&sent, sizeof sent, 0, kTag);
        int64_t reply = 0;
        comm.recv(&reply, sizeof reply, 0, kTag);
        const int64_t back = now_ns();
        if (back - sent < shortest) {
          shortest = back - sent;
          offset = sent + (back - sent) / 2 - reply;
        }
      }
    }
  }
  int64_t origin = comm.rank() == 0 ? now_ns() : 0;
  comm.broadcast(&origin, sizeof origin, 0);
  start_ns_ = origin + offset;
  started_ = true;
  recording_.store(true, std::memory_order_relaxed);
}

void Trace::bucket_started(size_t bucket, size_t bytes) {
  if (bucket >= bucket_begin_.size()) {
    bucket_begin_.resize(bucket + 1);
    bucket_bytes_.resize(bucket + 1);
  }
  bucket_begin_[bucket] = TraceBuffer::Clock::now();
  bucket_bytes_[bucket] = bytes;
}

void Trace::bucket_finished(size_t bucket) {
  if (bucket >= bucket_begin_.size()) return;
  main_.record("allreduce", bucket_begin_[bucket], TraceBuffer::Clock::now(), "bytes",
               static_cast<int64_t>(bucket_bytes_[bucket]), kFirstBucketTrack + static_cast<int>(bucket));
}

std::string Trace::events_json(int rank, const std::string& host) const {
  std::vector<TraceBuffer::Event> events;
  for (const TraceBuffer* buffer : {&main_, &reader_}) {
    const size_t n = buffer->size_.load(std::memory_order_acquire);
    events.insert(events.end(), buffer->events_.get(), buffer->events_.get() + n);
  }
  // Per track by start, an enclosing span before what it encloses (spans are recorded as they
  // end, the inner first): readers that sort by time alone then nest them right.
  std::sort(events.begin(), events.end(), [](const TraceBuffer::Event& a, const TraceBuffer::Event& b) {
    if (a.track != b.track) return a.track < b.track;
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns > b.end_ns;
  });
  const std::string pid = std::to_string(rank);
  std::string out;
  const auto metadata = [&](const char* name, int track, const std::string& args) {
    if (!out.empty()) out += ",\n";
    out += "{\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(thread_id(rank, track)) + ",\"name\":\"" +
           name + "\",\"args\":{" + args + "}}";
  };
  metadata("process_name", kMainTrack, "\"name\":\"rank " + pid + " (" + json_escaped(host) + ")\"");
  metadata("process_sort_index", kMainTrack, "\"sort_index\":" + pid);
  std::vector<int> tracks = {kMainTrack, kReaderTrack};
  for (const auto& e : events)  // sorted by track: each bucket's once
    if (e.track > tracks.back()) tracks.push_back(e.track);
  for (int track : tracks) {
    const std::string name = track == kMainTrack     ? "main"
                             : track == kReaderTrack ? "data reader"
                                                     : "allreduce bucket " + std::to_string(track - kFirstBucketTrack);
    metadata("thread_name", track, "\"name\":\"" + name + "\"");
    metadata("thread_sort_index", track, "\"sort_index\":" + std::to_string(track));
  }
  for (const auto& e : events) {
    out += ",\n{\"ph\":\"X\",\"pid\":" + pid + ",\"tid\":" + std::to_string(thread_id(rank, e.track)) + ",\"name\":\"" +
           e.name + "\",\"ts\":" + microseconds(e.begin_ns - start_ns_) +
           ",\"dur\":" + microseconds(e.end_ns - e.begin_ns);
    if (e.arg_name) out += ",\"args\":{\"" + std::string(e.arg_name) + "\":" + std::to_string(e.arg) + "}";
    out += "}";
  }
  return out;
}

void Trace::write(Communicator& comm, bool all, std::ostream& log) {
  recording_.store(false, std::memory_order_relaxed);
  const std::string mine = events_json(comm.rank(), host_name());
  const int ranks = all ? comm.size() : 1;
  // Each rank's part's size and its spans left out for want of room.
  int64_t own[2] = {static_cast<int64_t>(mine.size()),
                    main_.dropped_.load(std::memory_order_relaxed) + reader_.dropped_.load(std::memory_order_relaxed)};
  std::vector<int64_t> parts(2 * static_cast<size_t>(ranks));
  if (all) {
    comm.allgather(own, parts.data(), sizeof own);
  } else {
    parts.assign(own, own + 2);
    if (comm.rank() != 0) return;
  }
  // Parts go over in pieces that fit an MPI count.
  constexpr size_t kPiece = size_t{64} << 20;
  constexpr int kTag = 98;
  if (comm.rank() != 0) {
    for (size_t at = 0; at < mine.size(); at += kPiece)
      comm.send(mine.data() + at, std::min(kPiece, mine.size() - at), 0, kTag);
    return;
  }
  // Past a failure rank 0 still takes every rank's part (they are sending it), writing nothing.
  std::optional<AtomicFile> file;
  std::string failure;
  try {
    file.emplace(path_, "the trace (metrics.trace)");
  } catch (const IoError& e) {
    failure = e.what();
  }
  const auto put = [&](std::string_view bytes, bool last) {
    if (!file) return;
    try {
      if (last)
        file->commit(bytes);
      else
        file->append(bytes);
    } catch (const IoError& e) {
      failure = e.what();
      file.reset();
    }
  };
  put("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", false);
  put(mine, false);
  std::vector<char> piece;
  int64_t dropped = own[1];
  for (int r = 1; r < ranks; ++r) {
    const auto size = static_cast<size_t>(parts[2 * static_cast<size_t>(r)]);
    dropped += parts[2 * static_cast<size_t>(r) + 1];
    put(",\n", false);
    for (size_t at = 0; at < size; at += kPiece) {
      piece.resize(std::min(kPiece, size - at));
      comm.recv(piece.data(), piece.size(), r, kTag);
      put(std::string_view(piece.data(), piece.size()), false);
    }
  }
  put("\n]}\n", true);
  if (!failure.empty()) {
    std::fprintf(stderr, "mgtrain: warning: %s; the run's checkpoints and metrics are not affected\n",
                 printable(failure).c_str());
    std::fflush(stderr);
    return;
  }
  log << "trace: " << path_ << " (" << ranks << " rank(s), the first " << steps_
      << " step(s) at most; open it in ui.perfetto.dev or chrome://tracing)\n";
  if (dropped > 0)
    log << "note: trace: " << dropped << " span(s) left out, past " << kSpansPerThread
        << " on one thread of a rank; a lower metrics.trace_steps keeps them all\n";
  log << std::flush;
}

}  // namespace mgt
