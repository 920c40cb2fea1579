// Sync plugin `param_server`: the last sync.servers ranks hold shards of the parameters and run
// the optimizer plugin on them; the other ranks are workers that push each step's gradients and
// pull fresh parameters, with no global barrier. Bounded staleness (stale synchronous parallel):
// a worker receives parameters only while it is at most sync.staleness steps ahead of the
// slowest active worker, so 0 runs in lock step and a large value is fully asynchronous. Every
// push is applied as it arrives; the run ends when the servers have applied workers x steps
// pushes, so fast workers take over the share of a slow one. A worker that sends nothing within
// comm.timeout_s ends the job with a message naming it, or, with sync.on_lost_worker = continue,
// is left behind: the others finish the run and rank 0 writes the final checkpoint.
// Checkpoints (checkpoint.every_steps = N): each server sends rank 0 its shard and optimizer state
// as they are after every N x workers updates, and each worker's position; rank 0 writes the
// checkpoint once every server's has come, between its own steps, while the others train on.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>

#include <nlohmann/json.hpp>

#include "mgtrain/plugin.hpp"
#include "mgtrain/serving.hpp"

namespace {

const mgt::ConfigKey kKeys[] = {
    {"sync.servers", mgt::KeyType::positive_integer, "1", "ranks that serve parameters (the last ones)"},
    {"sync.staleness", mgt::KeyType::non_negative_integer, "4",
     "steps a worker may run ahead of the slowest (0: lock step)"},
    {"sync.on_lost_worker", mgt::KeyType::choice, "end",
     "a worker silent for comm.timeout_s (hung, stopped): end the job, or finish the run with the "
     "others (a worker that dies still ends the job under mpirun)",
     "end|continue"},
};

constexpr int kPushTag = 7101, kReplyTag = 7102, kFinalTag = 7103, kFarewellTag = 7104, kSnapshotTag = 7105,
              kShardStateTag = 7106;

// Each message starts with four 64-bit words.
struct Header {
  int64_t a = 0, b = 0, c = 0, d = 0;
};
// push:     a = worker's step, b = parameter version it computed on, c = 1 when leaving (no
//           payload)
// reply:    a = parameter version, b = 1 when the run's pushes are all in
// final, snapshot: a = updates applied, b = optimizer steps; payload each worker's steps applied
//           (int64), the shard, then its part of each optimizer state buffer
// end of snapshots (on the snapshot tag): c = 1, no payload
// farewell: a = workers lost; payload one byte per worker, 1 when lost
// shard state (rank 0 to a server, on resume): b = optimizer steps; payload its part of each
//           optimizer state buffer

using Clock = std::chrono::steady_clock;

class ParamServer final : public mgt::SyncStrategy, public mgt::ServingRole {
 public:
  explicit ParamServer(const mgt::ConfigSection& config)
      : servers_(static_cast<int>(config.get_int("servers"))),
        staleness_(config.get_int("staleness")),
        continue_without_lost_(config.get_string("on_lost_worker") == "continue") {}

  void setup(mgt::Communicator& comm, mgt::ParameterStore& store) override {
    comm_ = &comm;
    store_ = &store;
    workers_ = comm.size() - servers_;
    if (workers_ < 1)
      throw mgt::ConfigError("config key 'sync.servers' = " + std::to_string(servers_) + ": expected fewer than the " +
                             std::to_string(comm.size()) + " ranks, so that at least one rank trains");
    for (int k = 0; k <= servers_; ++k) {
      const size_t cut = store.flat_size() * static_cast<size_t>(k) / static_cast<size_t>(servers_);
      bounds_.push_back(k == servers_ ? store.flat_size() : cut / 16 * 16);
    }
    if (trains()) {
      for (int k = 0; k < servers_; ++k) {
        push_.emplace_back(message_bytes(k));
        reply_.emplace_back(message_bytes(k));
      }
      version_used_.assign(static_cast<size_t>(servers_), 0);
    }
  }

  // Every rank: where the run starts. Rank 0 tells the others the position its checkpoint kept
  // (each worker goes on from its own steps when the number of workers is the same, else all from
  // the checkpoint's step), and each server its part of the optimizer state.
  void start(mgt::Optimizer& optimizer, const mgt::ServingStart& start) override {
    checkpoint_every_ = start.checkpoint_every;
    start_step_ = start.step;
    std::vector<int64_t> position(1 + static_cast<size_t>(workers_), start.step);
    position[0] = start.step * workers_;
    if (comm_->rank() == 0 && start.resumed && start.saved.worker_steps.size() == static_cast<size_t>(workers_)) {
      position[0] = start.saved.updates;
      std::copy(start.saved.worker_steps.begin(), start.saved.worker_steps.end(), position.begin() + 1);
    }
    comm_->broadcast(position.data(), position.size() * sizeof(int64_t), 0);
    version_ = position[0];
    clocks_.assign(position.begin() + 1, position.end());
    if (trains()) {
      clock_ = clocks_[static_cast<size_t>(comm_->rank())];
      version_used_.assign(static_cast<size_t>(servers_), version_);
      if (comm_->rank() == 0 && checkpoint_every_ > 0) {
        const size_t buffers = optimizer.state_buffers().size();
        for (int k = 0; k < servers_; ++k) snapshots_in_.emplace_back(state_message_bytes(k, buffers));
        snapshot_requests_.resize(static_cast<size_t>(servers_));
        snapshot_arrived_.assign(static_cast<size_t>(servers_), false);
        for (int k = 0; k < servers_; ++k) expect_snapshot(k);
      }
    }
    if (!start.resumed) return;
    auto buffers = optimizer.state_buffers();
    if (trains()) {
      if (comm_->rank() != 0) return;
      for (int k = 0; k < servers_; ++k) {
        const size_t n = shard_size(k);
        std::vector<char> message(sizeof(Header) + buffers.size() * n * sizeof(float));
        write_header(message, {0, optimizer.step_count(), 0, 0});
        char* p = payload(message);
        for (auto& b : buffers) {
          std::memcpy(p, b.data + bounds_[k], n * sizeof(float));
          p += n * sizeof(float);
        }
        comm_->send(message.data(), message.size(), server_rank(k), kShardStateTag);
      }
      return;
    }
    const size_t n = shard_size(server_index());
    std::vector<char> message(sizeof(Header) + buffers.size() * n * sizeof(float));
    comm_->recv(message.data(), message.size(), 0, kShardStateTag);
    const char* p = payload(message);
    for (auto& b : buffers) {
      std::memcpy(b.data, p, n * sizeof(float));
      p += n * sizeof(float);
    }
    optimizer.set_step_count(read_header(message).b);
  }

  int64_t first_step(int64_t run_step) const override {
    return trains() && !clocks_.empty() ? clocks_[static_cast<size_t>(comm_->rank())] : run_step;
  }

  // Rank 0: a checkpoint's state, once every server's part of the same moment is in.
  bool take_snapshot(float* params, mgt::Optimizer& optimizer, mgt::ServingPosition& at) override {
    if (snapshots_in_.empty()) return false;
    for (int k = 0; k < servers_; ++k) {
      if (!snapshot_arrived_[k] && snapshot_requests_[k]->test()) snapshot_arrived_[k] = true;
      if (!snapshot_arrived_[k]) return false;
    }
    const int64_t updates = read_header(snapshots_in_[0]).a;
    for (int k = 0; k < servers_; ++k) {
      const Header h = read_header(snapshots_in_[k]);
      if (h.a != updates)
        throw mgt::CommError("parameter server rank " + std::to_string(server_rank(k)) + " sent its state after " +
                             std::to_string(h.a) + " updates, rank " + std::to_string(server_rank(0)) + " after " +
                             std::to_string(updates) + ": the checkpoint's shards would not be of one moment");
    }
    at = unpack_state(params, optimizer, snapshots_in_);
    for (int k = 0; k < servers_; ++k) expect_snapshot(k);
    return true;
  }

  mgt::ServingPosition position() const override { return position_; }

  mgt::ServingRole* serving() override { return this; }
  bool lockstep() const override { return false; }
  bool trains() const override { return comm_->rank() < workers_; }
  int train_world(const mgt::Communicator&) const override { return workers_; }
  size_t serve_size() const override { return shard_size(server_index()); }
  size_t serve_offset() const override { return bounds_[server_index()]; }
  bool finished() const override { return finished_; }
  std::vector<int> lost_ranks() const override { return lost_; }

  // Worker: push this step's gradients to every server, then take their fresh parameters.
  bool end_backward(int64_t) override {
    std::vector<std::unique_ptr<mgt::CommRequest>> requests;
    for (int k = 0; k < servers_; ++k) {
      write_header(push_[k], {clock_, version_used_[k], 0, 0});
      std::memcpy(payload(push_[k]), store_->grads_data() + bounds_[k], shard_size(k) * sizeof(float));
      requests.push_back(comm_->isend(push_[k].data(), push_[k].size(), server_rank(k), kPushTag));
      requests.push_back(comm_->irecv(reply_[k].data(), reply_[k].size(), server_rank(k), kReplyTag));
    }
    // Twice the deadline: when a worker goes silent the servers, who know which one, speak first.
    const double timeout = comm_->timeout_seconds();
    comm_->set_timeout_seconds(2 * timeout);
    for (auto& r : requests) r->wait();
    comm_->set_timeout_seconds(timeout);
    for (int k = 0; k < servers_; ++k) {
      const Header h = read_header(reply_[k]);
      version_used_[k] = h.a;
      finished_ = finished_ || h.b != 0;
      std::memcpy(store_->params_data() + bounds_[k], payload(reply_[k]), shard_size(k) * sizeof(float));
    }
    ++clock_;
    store_->discard_grads();  // the next backward writes them
    return false;             // the servers applied the update
  }

  // Server: apply pushes as they come, answer within the staleness bound.
  void serve(mgt::Optimizer& optimizer, const mgt::ServeContext& context) override {
    const int k = server_index();
    const size_t n = shard_size(k);
    float* params = store_->params_data() + bounds_[k];
    std::vector<Worker> workers(static_cast<size_t>(workers_));
    for (int w = 0; w < workers_; ++w) {
      workers[w].inbox.resize(message_bytes(k));
      workers[w].outbox.resize(message_bytes(k));
      workers[w].receive = comm_->irecv(workers[w].inbox.data(), workers[w].inbox.size(), w, kPushTag);
      workers[w].turn_since = Clock::now();
      workers[w].clock = clocks_[static_cast<size_t>(w)];
    }
    const int64_t target = (start_step_ + context.steps_per_worker) * workers_;
    const int64_t snapshot_every = checkpoint_every_ * workers_;
    Staleness interval;
    const timespec pause{0, 20000};
    int active = workers_;
    while (active > 0) {
      bool progressed = false;
      for (int w = 0; w < workers_; ++w) {
        Worker& worker = workers[w];
        if (!worker.active || !worker.receive->test()) continue;
        progressed = true;
        const Header h = read_header(worker.inbox);
        if (h.c != 0) {  // leaving
          worker.active = false;
          --active;
          continue;
        }
        interval.add(version_ - h.b);
        optimizer.set_learning_rate(context.learning_rate(version_ / workers_));
        optimizer.apply_update(params, reinterpret_cast<const float*>(payload(worker.inbox)), n);
        ++version_;
        worker.clock = h.a + 1;
        worker.owed_reply = true;
        if (snapshot_every > 0 && version_ % snapshot_every == 0 && version_ < target) {
          for (int v = 0; v < workers_; ++v) clocks_[static_cast<size_t>(v)] = workers[v].clock;
          send_snapshot(optimizer);
        }
        worker.receive = comm_->irecv(worker.inbox.data(), worker.inbox.size(), w, kPushTag);
        if (interval.count >= context.log_every * workers_) {
          context.write_metrics(interval.record(comm_->rank(), version_));
          interval = Staleness{};
        }
      }
      const bool done = version_ >= target;
      int64_t slowest = std::numeric_limits<int64_t>::max();
      for (const auto& worker : workers)
        if (worker.active) slowest = std::min(slowest, worker.clock);
      for (int w = 0; w < workers_; ++w) {
        Worker& worker = workers[w];
        if (!worker.owed_reply || (!done && worker.clock - slowest > staleness_)) continue;
        if (worker.send) worker.send->wait();
        write_header(worker.outbox, {version_, done ? 1 : 0, 0, 0});
        std::memcpy(payload(worker.outbox), params, n * sizeof(float));
        worker.send = comm_->isend(worker.outbox.data(), worker.outbox.size(), w, kReplyTag);
        worker.owed_reply = false;
        worker.turn_since = Clock::now();
        progressed = true;
      }
      if (progressed) continue;
      // Nothing arrived: check that every active worker is still talking, then leave the core
      // to the workers for a moment. A worker whose reply is held back (the staleness bound)
      // waits for the others, not the other way round: it is not silent.
      const auto now = Clock::now();
      for (int w = 0; w < workers_; ++w) {
        Worker& worker = workers[w];
        if (!worker.active || worker.owed_reply ||
            std::chrono::duration<double>(now - worker.turn_since).count() <= comm_->timeout_seconds())
          continue;
        const std::string silent =
            "parameter server rank " + std::to_string(comm_->rank()) + ": worker rank " + std::to_string(w) +
            " sent nothing for " + std::to_string(static_cast<int>(comm_->timeout_seconds())) +
            " s (its last push was step " + std::to_string(worker.clock) + "; comm.timeout_s); it is stuck or gone";
        if (!continue_without_lost_) throw mgt::CommError(silent);
        if (w == 0)
          throw mgt::CommError(silent +
                               "; rank 0 writes the final checkpoint, so the run cannot go on "
                               "without it (sync.on_lost_worker = continue)");
        --active;
        lose(w, worker, silent, active);
      }
      nanosleep(&pause, nullptr);
    }
    for (auto& worker : workers)
      if (worker.send) worker.send->wait();
    for (int w = 0; w < workers_; ++w) clocks_[static_cast<size_t>(w)] = workers[w].clock;
    if (interval.count > 0) context.write_metrics(interval.record(comm_->rank(), version_));
    // Every worker that said goodbye learns which ones were lost: then no survivor waits in a
    // collective for a rank that will never come.
    std::vector<char> farewell(sizeof(Header) + static_cast<size_t>(workers_), 0);
    for (int lost : lost_) farewell[sizeof(Header) + static_cast<size_t>(lost)] = 1;
    write_header(farewell, {static_cast<int64_t>(lost_.size()), 0, 0, 0});
    for (int w = 0; w < workers_; ++w)
      if (!workers[w].lost) comm_->send(farewell.data(), farewell.size(), w, kFarewellTag);
  }

  // Workers say they are leaving; servers send their shard and optimizer state to rank 0.
  void gather_state(mgt::Optimizer& optimizer) override {
    if (trains()) {
      const Header bye{clock_, 0, 1, 0};
      for (int k = 0; k < servers_; ++k) comm_->send(&bye, sizeof(bye), server_rank(k), kPushTag);
      // A server answers once every other worker has said goodbye or been found silent, which
      // takes up to one deadline.
      std::vector<char> farewell(sizeof(Header) + static_cast<size_t>(workers_));
      const double timeout = comm_->timeout_seconds();
      comm_->set_timeout_seconds(2 * timeout);
      for (int k = 0; k < servers_; ++k) {
        comm_->recv(farewell.data(), farewell.size(), server_rank(k), kFarewellTag);
        for (int w = 0; w < workers_; ++w)
          if (farewell[sizeof(Header) + static_cast<size_t>(w)] != 0 &&
              std::find(lost_.begin(), lost_.end(), w) == lost_.end())
            lost_.push_back(w);
      }
      comm_->set_timeout_seconds(timeout);
      std::sort(lost_.begin(), lost_.end());
      if (comm_->rank() != 0) return;
      // Snapshots still on their way, then each server's end of them.
      for (int k = 0; k < servers_ && !snapshots_in_.empty(); ++k) {
        while (true) {
          if (!snapshot_arrived_[k]) snapshot_requests_[k]->wait();
          snapshot_arrived_[k] = false;
          if (read_header(snapshots_in_[k]).c != 0) break;
          expect_snapshot(k);
        }
      }
      std::vector<std::vector<char>> finals;
      const size_t buffers = optimizer.state_buffers().size();
      for (int k = 0; k < servers_; ++k) {
        finals.emplace_back(state_message_bytes(k, buffers));
        comm_->recv(finals.back().data(), finals.back().size(), server_rank(k), kFinalTag);
      }
      position_ = unpack_state(store_->params_data(), optimizer, finals);
      return;
    }
    if (checkpoint_every_ > 0) {
      const Header end{0, 0, 1, 0};
      snapshots_out_.emplace_back(sizeof(Header));
      write_header(snapshots_out_.back().message, end);
      snapshots_out_.back().request =
          comm_->isend(snapshots_out_.back().message.data(), sizeof(Header), 0, kSnapshotTag);
    }
    const std::vector<char> message = pack_state(optimizer);
    comm_->send(message.data(), message.size(), 0, kFinalTag);
    for (auto& out : snapshots_out_) out.request->wait();
    snapshots_out_.clear();
  }

 private:
  // This server's state as a final or snapshot message.
  std::vector<char> pack_state(mgt::Optimizer& optimizer) const {
    const int k = server_index();
    const size_t n = shard_size(k);
    auto buffers = optimizer.state_buffers();
    std::vector<char> message(state_message_bytes(k, buffers.size()));
    write_header(message, {version_, optimizer.step_count(), 0, 0});
    char* p = payload(message);
    std::memcpy(p, clocks_.data(), clocks_.size() * sizeof(int64_t));
    p += clocks_.size() * sizeof(int64_t);
    std::memcpy(p, store_->params_data() + bounds_[k], n * sizeof(float));
    for (auto& b : buffers) {
      p += n * sizeof(float);
      std::memcpy(p, b.data, n * sizeof(float));
    }
    return message;
  }

  // Rank 0: every server's state message into the whole buffer and optimizer; the first server's
  // count of each worker's steps is the position.
  mgt::ServingPosition unpack_state(float* params, mgt::Optimizer& optimizer,
                                    const std::vector<std::vector<char>>& messages) const {
    auto buffers = optimizer.state_buffers();
    mgt::ServingPosition at;
    for (int k = 0; k < servers_; ++k) {
      const size_t n = shard_size(k);
      const Header h = read_header(messages[k]);
      const char* p = messages[k].data() + sizeof(Header);
      if (k == 0) {
        at.updates = h.a;
        at.worker_steps.resize(static_cast<size_t>(workers_));
        std::memcpy(at.worker_steps.data(), p, at.worker_steps.size() * sizeof(int64_t));
        optimizer.set_step_count(h.b);
      }
      p += static_cast<size_t>(workers_) * sizeof(int64_t);
      std::memcpy(params + bounds_[k], p, n * sizeof(float));
      for (auto& b : buffers) {
        p += n * sizeof(float);
        std::memcpy(b.data + bounds_[k], p, n * sizeof(float));
      }
    }
    return at;
  }

  // Server: this moment's state to rank 0, without waiting for it to be taken.
  void send_snapshot(mgt::Optimizer& optimizer) {
    while (!snapshots_out_.empty() && snapshots_out_.front().request->test()) snapshots_out_.pop_front();
    snapshots_out_.push_back({pack_state(optimizer), nullptr});
    auto& out = snapshots_out_.back();
    out.request = comm_->isend(out.message.data(), out.message.size(), 0, kSnapshotTag);
  }

  // Rank 0: waits for server k's next snapshot (or its end).
  void expect_snapshot(int k) {
    snapshot_arrived_[k] = false;
    snapshot_requests_[k] =
        comm_->irecv(snapshots_in_[k].data(), snapshots_in_[k].size(), server_rank(k), kSnapshotTag);
  }

  struct Outgoing {
    explicit Outgoing(size_t bytes) : message(bytes) {}
    Outgoing(std::vector<char> m, std::unique_ptr<mgt::CommRequest> r) : message(std::move(m)), request(std::move(r)) {}
    std::vector<char> message;
    std::unique_ptr<mgt::CommRequest> request;
  };

  struct Worker {
    std::vector<char> inbox, outbox;
    std::unique_ptr<mgt::CommRequest> receive, send;
    int64_t clock = 0;
    bool active = true, owed_reply = false, lost = false;
    Clock::time_point turn_since;  // since when the server waits for its next push (reply sent)
  };

  // sync.on_lost_worker = continue: the others go on without worker `w`.
  void lose(int w, Worker& worker, const std::string& silent, int remaining) {
    worker.active = false;
    worker.lost = true;
    worker.owed_reply = false;
    // Its requests may never complete, and waiting on them would only wait out another deadline:
    // they are left to MPI, which the job leaves without MPI_Finalize (see lost_ranks()).
    (void)worker.receive.release();
    (void)worker.send.release();
    lost_.push_back(w);
    std::fprintf(stderr,
                 "mgtrain: warning: [rank %d] %s; going on with the other %d worker(s) "
                 "(sync.on_lost_worker = continue)\n",
                 comm_->rank(), silent.c_str(), remaining);
    std::fflush(stderr);
  }

  // How old the parameters behind the applied gradients were, in updates.
  struct Staleness {
    int64_t count = 0, min = std::numeric_limits<int64_t>::max(), max = 0;
    double sum = 0;
    void add(int64_t s) {
      ++count;
      min = std::min(min, s);
      max = std::max(max, s);
      sum += static_cast<double>(s);
    }
    // One JSON record, keys in this order (`mgtrain report` and the tests read them).
    std::string record(int rank, int64_t version) const {
      nlohmann::ordered_json line;
      line["server_rank"] = rank;
      line["updates"] = version;
      line["staleness_min"] = min;
      line["staleness_mean"] = sum / static_cast<double>(count);
      line["staleness_max"] = max;
      return line.dump();
    }
  };

  int server_index() const { return comm_->rank() - workers_; }
  int server_rank(int k) const { return workers_ + k; }
  size_t shard_size(int k) const { return bounds_[k + 1] - bounds_[k]; }
  size_t message_bytes(int k) const { return sizeof(Header) + shard_size(k) * sizeof(float); }
  size_t state_message_bytes(int k, size_t buffers) const {
    return sizeof(Header) + static_cast<size_t>(workers_) * sizeof(int64_t) +
           (1 + buffers) * shard_size(k) * sizeof(float);
  }
  static char* payload(std::vector<char>& m) { return m.data() + sizeof(Header); }
  static void write_header(std::vector<char>& m, const Header& h) { std::memcpy(m.data(), &h, sizeof(h)); }
  static Header read_header(const std::vector<char>& m) {
    Header h;
    std::memcpy(&h, m.data(), sizeof(h));
    return h;
  }

  int servers_;
  int64_t staleness_;
  bool continue_without_lost_;
  std::vector<int> lost_;  // workers the run went on without (servers: found; workers: told)
  int workers_ = 0;
  mgt::Communicator* comm_ = nullptr;
  mgt::ParameterStore* store_ = nullptr;
  std::vector<size_t> bounds_;  // shard k is [bounds_[k], bounds_[k+1]) of the flat buffers
  // Worker side.
  std::vector<std::vector<char>> push_, reply_;
  std::vector<int64_t> version_used_;
  int64_t clock_ = 0;
  bool finished_ = false;
  // Checkpoints, rank 0: each server's next snapshot; the final position.
  std::vector<std::vector<char>> snapshots_in_;
  std::vector<std::unique_ptr<mgt::CommRequest>> snapshot_requests_;
  std::vector<bool> snapshot_arrived_;
  mgt::ServingPosition position_;
  // Server side.
  int64_t version_ = 0;
  std::deque<Outgoing> snapshots_out_;
  // Both: the run's first step, steps between checkpoints, each worker's steps (at the start; on a
  // server, as applied at its last snapshot or the end).
  int64_t start_step_ = 0, checkpoint_every_ = 0;
  std::vector<int64_t> clocks_;
};

}  // namespace

MGT_SYNC_PLUGIN("param_server", "1.1.0",
                "asynchronous parameter server with bounded staleness; servers run the optimizer on shards", kKeys,
                ParamServer)
