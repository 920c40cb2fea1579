#pragma once
// The `nccl` backend of mgt::Communicator, for device memory, and the deadline-bounded host wait
// on a stream that the trainer uses to end a step. No CUDA or NCCL header is included.
//
// Every data operation (all-reduce, broadcast, all-gather, send and receive, blocking or not) is
// ordered on the device, never on the host: it runs on the communicator's own stream after the
// work already enqueued on `compute`, and blocking ones make later work on `compute` wait for it
// (an event recorded on `compute` that the communication stream waits for, and back). The calls
// return once the work is enqueued, so they may be captured into a CUDA graph of `compute`:
// NCCL supports capture, and the fork and join through events are captured with it. A captured
// operation is counted in collective_count() when captured, not when the graph runs. Capture in
// cudaStreamCaptureModeThreadLocal mode after one uncaptured run of each operation (NCCL connects
// lazily), and wait every request before the capture ends.
//
// The non-blocking calls return a request whose test() is always true (the operation is
// enqueued; its completion is ordered on the device) and whose wait() makes `compute` wait for
// it, without blocking the host. A request must not outlive its communicator. Tags of send and
// receive are ignored: NCCL matches point-to-point operations by order between two ranks.
// Counts of any size_t are passed through; zero elements or bytes return at once, unstarted and
// uncounted.
//
// Host waits (barrier, and the flush before the communicator is destroyed) poll the streams
// with the deadline timeout_seconds() and watch NCCL's asynchronous error; a deadline that
// passes, or an error, marks the communicator failed and throws mgt::CommError naming the
// operation, step() and rank. Every later operation then throws CommError too. Communicator
// creation and split() block in NCCL without such a deadline. Rank, size, local rank and node are
// those of the host communicator.
//
// Destroying it ends NCCL's communicator: aborted (ncclCommAbort, which also ends this rank's NCCL
// kernels still waiting for peers) when it failed or an exception is unwinding, else destroyed
// after its stream drains. Either call waits until every CUDA graph holding work captured from it
// has been destroyed (NCCL keeps the communicator for them), so destroy such graphs first.
//
// send, recv, isend and irecv are each issued as called, one NCCL operation at a time: two ranks
// that both send before they receive wait for each other forever (NCCL needs such a pair in one
// group). No strategy exchanges device memory point to point.
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cuda/runtime.hpp"
#include "mgtrain/communicator.hpp"

namespace mgt::cuda {

// A communicator over the ranks of `host` (the MPI communicator of the same ranks), one NCCL
// rank per process on device `device`, which must be current. Rank 0's ncclUniqueId reaches the
// others through host.broadcast, so every rank of `host` must call this together. split() (color
// 0 or more) splits `host` the same way and keeps that part inside the new communicator, which
// shares this one's communication stream (the operations of a communicator and its parts run one
// at a time in the order called, never concurrently, which NCCL needs to rule out a deadlock
// between them) and `compute`. barrier() waits for both streams, then
// host.barrier(); abort() calls host.abort(), which ends every process of the job.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Stream compute, int device);

// When `comm` is an nccl communicator that NCCL reports failed (ncclCommGetAsyncError: a peer or
// the network lost), marks it failed and throws mgt::CommError naming its step and rank, with NCCL's
// reason; otherwise, or for any other communicator, returns. Cheap enough to call every
// millisecond while the host waits for a step.
void raise_if_failed(Communicator& comm);

// Polls `stream` until its work is done, sleeping about 50 us between polls; after `timeout_s`
// throws mgt::CommError "<what> at step <step> did not finish within <timeout_s> s on rank
// <rank>: ...". A failed query (a device error) throws mgt::CudaError. Must not be called on a
// stream being captured.
void wait_with_deadline(Stream stream, double timeout_s, const std::string& what, int rank, int64_t step);

}  // namespace mgt::cuda
