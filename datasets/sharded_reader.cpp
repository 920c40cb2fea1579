// The sharded reader and its prefetch thread.
#include "datasets/sharded_reader.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/idle_core.hpp"
#include "datasets/crc32.hpp"
#include "datasets/data_files.hpp"
#include "datasets/hdf5_util.hpp"
#include "datasets/mapped_copy.hpp"
#include "datasets/regular_file.hpp"
#include "mgtrain/rng.hpp"

namespace mgt::data {

namespace {

bool is_prime(size_t n) {
  if (n < 2) return false;
  for (size_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

// HDF5 wants a prime number of hash slots, about 10x the chunks that fit in the cache.
size_t chunk_cache_slots(size_t cache_bytes, size_t chunk_bytes) {
  size_t n = std::clamp<size_t>(10 * (cache_bytes / std::max<size_t>(chunk_bytes, 1)), 521, 1u << 20);
  while (!is_prime(n)) ++n;
  return n;
}

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

constexpr int64_t kMaxCropPadding = 1024;

}  // namespace

Augmentation parse_augmentation(const std::string& spec) {
  Augmentation augment;
  if (trimmed(spec).empty()) return augment;
  bool seen_crop = false, seen_flip = false;
  size_t from = 0;
  for (;;) {
    const size_t comma = spec.find(',', from);
    const std::string entry = trimmed(spec.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    auto bad = [&](const std::string& why) {
      return ConfigError("entry '" + entry + "' of '" + spec + "' " + why +
                         "; expected a comma-separated list of crop:P (pad each side by P pixels, then crop back, "
                         "1 <= P <= " +
                         std::to_string(kMaxCropPadding) + ") and flip (mirror the width axis half the time)");
    };
    const size_t colon = entry.find(':');
    const std::string op = trimmed(entry.substr(0, colon));
    const std::string arg = colon == std::string::npos ? "" : trimmed(entry.substr(colon + 1));
    if (entry.empty()) throw bad("is empty");
    if (op == "crop") {
      if (seen_crop) throw bad("repeats crop");
      seen_crop = true;
      if (arg.empty()) throw bad("has no padding");
      if (arg.find_first_not_of("0123456789") != std::string::npos || arg.size() > 4 || std::stoll(arg) < 1 ||
          std::stoll(arg) > kMaxCropPadding)
        throw bad("has padding '" + arg + "'");
      augment.crop_padding = std::stoll(arg);
    } else if (op == "flip") {
      if (seen_flip) throw bad("repeats flip");
      seen_flip = true;
      if (colon != std::string::npos) throw bad("gives flip an argument");
      augment.flip = true;
    } else {
      throw bad("is not an augmentation");
    }
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return augment;
}

AugmentDraw augment_draw(const Augmentation& augment, uint64_t seed, int64_t epoch, int64_t row) {
  static const uint64_t purpose = rng::purpose_hash("data.augment");
  const auto words =
      rng::philox(rng::make_key(seed, purpose), static_cast<uint64_t>(epoch), static_cast<uint64_t>(row));
  // A window offset uniform in [0, 2P] by a 32-bit multiply-shift (bias below 2^-21 for P <= 1024).
  const uint64_t offsets = 2 * static_cast<uint64_t>(augment.crop_padding) + 1;
  AugmentDraw draw;
  draw.offset_y = static_cast<int64_t>((uint64_t{words[0]} * offsets) >> 32);
  draw.offset_x = static_cast<int64_t>((uint64_t{words[1]} * offsets) >> 32);
  draw.flip = augment.flip && (words[2] & 1u) != 0;
  return draw;
}

struct ShardedReader::Impl {
  struct Slot {
    Tensor x;                      // local_batch * numel floats, allocated once (a view of `memory` when it is set)
    std::shared_ptr<void> memory;  // from ReaderOptions::allocate_slot
    std::vector<int32_t> y;
    int64_t rows = 0, epoch = 0, batch = 0;
  };

  // One file of the data set (data.train may name several: datasets/data_files.hpp), holding its
  // rows [first, first + info.num_samples) of the whole; the state below is per file.
  struct Part {
    DatasetInfo info;  // the file's own
    int64_t first = 0;
    int64_t rows() const { return info.num_samples; }
    // Normalisation per channel (one channel spanning the whole sample when the file's mean and
    // std are scalars): channel c covers elements [c * channel_numel, (c + 1) * channel_numel).
    // Each file's samples are normalised as that file says.
    int64_t channels = 1, channel_numel = 0;
    std::vector<float> lut;            // channels * 256: uint8 -> normalised float
    std::vector<float> mean, inv_std;  // per channel, for float32 files
    std::vector<float> pad_value;      // per channel: what a 0-valued pixel normalises to
    // HDF5 state, touched only under hdf5_mutex() (by the constructor, the thread, the destructor).
    h5::Opened file;
    // x's type as the file stores it, where that is not as memory holds it (big-endian float32):
    // rows are then read as stored, the bytes the row checksums cover, and converted to native
    // values once checked (to_native). Unset: rows are read as memory holds them.
    h5::Id x_stored_type;
    h5::Id x_fspace, y_fspace;
    // Direct reads (ReadMode::Direct): the file, opened once more, and the byte offset of each
    // extent of `extent_rows` rows (a chunk; the whole dataset when contiguous). y and the row
    // checksums are then in all_y and all_crc.
    int direct_fd = -1;
    // The file mapped (read only, shared), where it could be: a row is then a copy out of the page
    // cache, not a system call (a pread a row cost about a tenth of the np=1 step). The ranks of a
    // node share the pages, where data.in_memory copies the file into each. Null: pread.
    const unsigned char* mapping = nullptr;
    size_t mapping_bytes = 0;
    uint64_t opened_bytes = 0;  // the file's size when direct_fd was opened
    int64_t extent_rows = 0;
    std::vector<uint64_t> extent_offset;
    // With in_memory: the whole file's x (raw, as stored), y and row checksums.
    std::vector<unsigned char> all_x;
    std::vector<int32_t> all_y;
    std::vector<uint32_t> all_crc;
  };

  ReaderOptions opt;
  DatasetInfo info;  // of the whole data set
  std::vector<Part> parts;
  int64_t n = 0, numel = 0, local = 0, bpe = 0;
  bool u8 = true;
  // A sample's bytes as the file stores it (uint8 or float32).
  size_t row_bytes() const { return static_cast<size_t>(numel) * (u8 ? 1 : 4); }
  // Augmentation of [C, H, W] samples: each row is normalised into `normalised`, then cropped and
  // flipped into its slot.
  int64_t height = 0, width = 0;
  std::vector<float> normalised;

  hid_t x_read_type(const Part& p) const {
    return p.x_stored_type ? p.x_stored_type.get() : u8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
  }
  h5::Id x_mspace, y_mspace;
  size_t x_rank = 0;
  // The memory space has the file's rank ([local, sample...]): with equal ranks HDF5 maps the
  // selection to chunks per hyperslab; with a flat memory space it iterates per element, which
  // measured far slower (docs/benchmarks.md, "The data reader").
  std::vector<hsize_t> hs_start, hs_count, ms_start;

  // Owned by the prefetch thread while it runs.
  std::vector<Slot> slots;
  std::vector<unsigned char> raw;                  // local * numel * (1 or 4) bytes, file order
  std::vector<std::pair<int64_t, int64_t>> order;  // (row of the data set, position in batch), sorted by row
  std::vector<hsize_t> ycoords;
  std::vector<int32_t> yraw;
  std::vector<uint32_t> crcraw;  // the rows' stored checksums, when the file has them
  std::vector<int64_t> perm;
  int64_t perm_epoch = -1;

  // Ring protocol: batch k of the stream lives in slots[k % slots.size()]. The thread may fill k
  // once k - released < slots.size(); next() hands out `handed` and releases the previous one.
  std::mutex m;
  std::condition_variable cv;
  std::thread thread;
  bool stopping = false, started = false;
  int64_t filled = 0, released = 0, handed = 0;
  // `filled`, or the largest int64 once a read failed: for next()'s wait with a shared core, which
  // the fiber evaluates between rows, without this mutex.
  std::atomic<int64_t> produced{0};
  bool shares_core = false;  // this reader holds IdleCore's claim
  // Sharing the core, run() is IdleCore's worker: a fiber on the step's thread, started at
  // start_epoch and start_batch, instead of a thread of its own.
  bool fiber = false;
  int64_t start_epoch = 0, start_batch = 0;
  std::exception_ptr error;
  int64_t error_at = -1;

  // HDF5 ids must be closed under the mutex too (other readers' threads may be reading).
  void close_hdf5() {
    for (Part& p : parts) close_direct(p);
    std::lock_guard lock(hdf5_mutex());
    x_mspace.reset();
    y_mspace.reset();
    for (Part& p : parts) {
      p.x_fspace.reset();
      p.y_fspace.reset();
      p.x_stored_type.reset();
      p.file = h5::Opened{};
    }
  }

  void stop() {
    {
      std::lock_guard lk(m);
      stopping = true;
    }
    cv.notify_all();
    if (fiber) {
      IdleCore::stop_worker(this);  // runs it until it returns
      fiber = false;
    }
    if (thread.joinable()) thread.join();
    stopping = false;
  }

  void run_from_start() { run(start_epoch, start_batch); }

  // Sharing the step's core, this is a fiber that reads only while the step waits
  // (core/src/base/idle_core.hpp); otherwise a thread of its own.
  void run(int64_t epoch, int64_t batch) {
    for (int64_t k = 0;; ++k) {
      {
        std::unique_lock lk(m);
        const auto free_slot = [&] { return stopping || k - released < static_cast<int64_t>(slots.size()); };
        if (fiber) {
          // The core goes back to the step until next() frees a slot (IdleCore::wake).
          while (!free_slot()) {
            lk.unlock();
            IdleCore::rest();
            lk.lock();
          }
        } else {
          cv.wait(lk, free_slot);
        }
        if (stopping) return;
      }
      try {
        const auto read_start = std::chrono::steady_clock::now();
        fill(slots[static_cast<size_t>(k) % slots.size()], epoch, batch);
        if (opt.on_batch_read) opt.on_batch_read(read_start, std::chrono::steady_clock::now(), batch);
      } catch (const Stopped&) {
        return;
      } catch (...) {
        std::lock_guard lk(m);
        error = std::current_exception();
        error_at = k;
        produced.store(std::numeric_limits<int64_t>::max(), std::memory_order_release);
        cv.notify_all();
        return;
      }
      {
        std::lock_guard lk(m);
        filled = k + 1;
        produced.store(filled, std::memory_order_release);
      }
      cv.notify_all();
      if (++batch == bpe) {
        batch = 0;
        ++epoch;
      }
    }
  }

  std::string rows_error(const Part& p, int64_t lo, int64_t hi, int64_t epoch, int64_t batch,
                         const std::string& dataset) {
    const std::string rows =
        lo == hi ? "row " + std::to_string(lo) : "rows " + std::to_string(lo) + ".." + std::to_string(hi);
    return "data file '" + p.info.path + "': reading " + rows + " of dataset '" + h5::object_path(dataset) +
           "' failed (epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch) + "): " + h5::error_text();
  }

  // Thrown by pause() when the reader stops while it waits for the core.
  struct Stopped {};
  // Between two pieces of a batch's work (a row): sharing the step's core, the fiber goes back to
  // the step here unless the core is lent and the step's wait is not over. Not while holding
  // hdf5_mutex(): another reader's thread may need it, and the step's thread may take it.
  static void pause() {
    if (!IdleCore::may_run()) throw Stopped{};
  }

  void fill(Slot& s, int64_t epoch, int64_t batch) {
    pause();
    const int64_t B = opt.global_batch;
    const int64_t in_batch = std::min(B, n - batch * B);
    const int64_t lo = std::min<int64_t>(opt.rank * local, in_batch);
    const int64_t hi = std::min<int64_t>((opt.rank + 1) * local, in_batch);
    s.rows = hi - lo;
    s.epoch = epoch;
    s.batch = batch;
    if (s.rows == 0) return;

    if (opt.shuffle && perm_epoch != epoch) {
      perm = rng::epoch_permutation(opt.seed, epoch, n);
      perm_epoch = epoch;
    }
    order.clear();
    const int64_t base = batch * B + lo;
    for (int64_t i = 0; i < s.rows; ++i)
      order.emplace_back(opt.shuffle ? perm[static_cast<size_t>(base + i)] : base + i, i);
    std::sort(order.begin(), order.end());

    // File by file: the sorted rows of each file are one run of `order`.
    int64_t j0 = 0;
    for (Part& p : parts) {
      int64_t j1 = j0;
      while (j1 < s.rows && order[static_cast<size_t>(j1)].first < p.first + p.rows()) ++j1;
      if (j1 > j0) fill_from(p, s, j0, j1, epoch, batch);
      j0 = j1;
    }
  }

  // Positions [j0, j1) of `order`, rows of file p, into slot s.
  void fill_from(Part& p, Slot& s, int64_t j0, int64_t j1, int64_t epoch, int64_t batch) {
    read_sorted(p, j0, j1, epoch, batch);

    // Rows read as stored in another layout: each checked as stored, then all made native.
    const size_t elem = u8 ? 1 : 4;
    const bool checked_as_stored = p.info.row_checksums && p.x_stored_type;
    if (checked_as_stored)
      for (int64_t j = j0; j < j1; ++j) {
        pause();
        verify_row(p, order[static_cast<size_t>(j)].first - p.first, raw.data() + static_cast<size_t>(j * numel) * elem,
                   numel * elem, yraw[static_cast<size_t>(j)], crcraw[static_cast<size_t>(j)], epoch, batch);
      }
    if (p.x_stored_type) to_native(p, j0, j1, epoch, batch);

    // Scatter back to batch order, normalising (and augmenting) on the way.
    const bool augmenting = opt.augment.any();
    const int64_t channels = p.channels, channel_numel = p.channel_numel;
    for (int64_t j = j0; j < j1; ++j) {
      pause();
      // The augmentation is drawn by the row of the data set, the file's row says what is at fault.
      const auto [sample, pos] = order[static_cast<size_t>(j)];
      const int64_t row = sample - p.first;
      float* const slot_row = s.x.data() + pos * numel;
      float* const dst = augmenting ? normalised.data() : slot_row;
      const unsigned char* src = raw.data() + static_cast<size_t>(j * numel) * elem;
      if (p.info.row_checksums && !checked_as_stored)
        verify_row(p, row, src, numel * elem, yraw[static_cast<size_t>(j)], crcraw[static_cast<size_t>(j)], epoch,
                   batch);
      if (u8) {
        for (int64_t c = 0; c < channels; ++c) {
          const float* channel_lut = p.lut.data() + c * 256;
          for (int64_t i = c * channel_numel, end = i + channel_numel; i < end; ++i) dst[i] = channel_lut[src[i]];
        }
      } else {
        const float* f = reinterpret_cast<const float*>(src);
        // NaN and Inf are the floats whose exponent bits are all set; adding one to the exponent
        // then carries into the sign bit. An OR over the row keeps the check in the vectorised loop.
        uint32_t carries = 0;
        for (int64_t c = 0; c < channels; ++c) {
          const float m = p.mean[static_cast<size_t>(c)], inv = p.inv_std[static_cast<size_t>(c)];
          for (int64_t i = c * channel_numel, end = i + channel_numel; i < end; ++i) {
            uint32_t bits;
            std::memcpy(&bits, f + i, sizeof bits);
            carries |= (bits & 0x7f800000u) + 0x00800000u;
            dst[i] = (f[i] - m) * inv;
          }
        }
        if (carries & 0x80000000u) nonfinite_error(p, row, f, epoch, batch);
      }
      if (augmenting) augment_row(p, slot_row, dst, augment_draw(opt.augment, opt.seed, epoch, sample));
      const int32_t label = yraw[static_cast<size_t>(j)];
      if (label < 0 || label >= p.info.num_classes) throw DataError(label_error(p.info, row, label));
      s.y[static_cast<size_t>(pos)] = label;
    }
  }

  // Random crop with padding, then flip, of one normalised [C, H, W] sample: out[c][y][x] is
  // padded[c][y + offset_y][x' + offset_x] with x' = W-1-x when flipped, else x, where padded is
  // the sample with P pixels of padding on each side. As torchvision's RandomCrop(padding=P)
  // before Normalize, the padding is 0 in the raw image, so in normalised space it is what a
  // 0-valued pixel becomes, per channel (pad_value).
  void augment_row(const Part& p, float* out, const float* in, const AugmentDraw& draw) const {
    const int64_t P = opt.augment.crop_padding;
    for (int64_t c = 0; c < info.sample_shape[0]; ++c) {
      const float pad = p.pad_value[static_cast<size_t>(p.channels == 1 ? 0 : c)];
      for (int64_t y = 0; y < height; ++y) {
        float* out_row = out + (c * height + y) * width;
        const int64_t source_y = y + draw.offset_y - P;
        if (source_y < 0 || source_y >= height) {
          std::fill(out_row, out_row + width, pad);
          continue;
        }
        const float* in_row = in + (c * height + source_y) * width;
        // The window's columns x + offset_x - P that fall inside the image, [first, last), are
        // copied; the rest is padding. A flip then reverses the finished row.
        const int64_t shift = draw.offset_x - P;
        const int64_t first = std::clamp<int64_t>(-shift, 0, width),
                      last = std::clamp<int64_t>(width - shift, 0, width);
        std::fill(out_row, out_row + first, pad);
        std::copy(in_row + first + shift, in_row + last + shift, out_row + first);
        std::fill(out_row + last, out_row + width, pad);
        if (draw.flip) std::reverse(out_row, out_row + width);
      }
    }
  }

  void verify_row(const Part& p, int64_t row, const unsigned char* bytes, int64_t size, int32_t label, uint32_t stored,
                  int64_t epoch, int64_t batch) {
    const uint32_t computed = row_crc32_label(crc32_update(0, bytes, size), label);
    if (computed == stored) return;
    char sums[64];
    std::snprintf(sums, sizeof sums, "stored 0x%08x, computed 0x%08x", stored, computed);
    throw DataError("data file '" + p.info.path + "': row " + std::to_string(row) + " of '" +
                    h5::object_path(opt.x_name) + "' and '" + h5::object_path(opt.y_name) + "' fails its checksum (" +
                    sums + "; epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch) +
                    "): the file is damaged, convert or copy it again");
  }

  // The batch's rows at positions [j0, j1) in raw, as stored (p.x_stored_type), into native
  // values in place.
  void to_native(const Part& p, int64_t j0, int64_t j1, int64_t epoch, int64_t batch) {
    std::lock_guard lock(hdf5_mutex());
    h5::silence_errors();
    if (H5Tconvert(p.x_stored_type.get(), u8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT,
                   static_cast<size_t>((j1 - j0) * numel), raw.data() + static_cast<size_t>(j0 * numel) * (u8 ? 1 : 4),
                   nullptr, H5P_DEFAULT) < 0)
      throw DataError("data file '" + p.info.path + "': converting the rows of batch " + std::to_string(batch) +
                      " (epoch " + std::to_string(epoch) + ") of '" + h5::object_path(opt.x_name) +
                      "' from their stored type failed: " + h5::error_text());
  }

  // A NaN or Inf in the samples would surface only as a non-finite gradient on some rank, steps
  // later; this names the row and the element instead.
  [[noreturn]] void nonfinite_error(const Part& p, int64_t row, const float* values, int64_t epoch, int64_t batch) {
    int64_t at = 0;
    while (at < numel && std::isfinite(values[at])) ++at;
    const float v = values[at];
    throw DataError("data file '" + p.info.path + "': row " + std::to_string(row) + " of '" +
                    h5::object_path(opt.x_name) + "' holds " +
                    (std::isnan(v) ? "NaN"
                     : v > 0       ? "inf"
                                   : "-inf") +
                    " at element " + std::to_string(at) + " (epoch " + std::to_string(epoch) + ", batch " +
                    std::to_string(batch) + "), expected finite float32 samples");
  }

  // Under hdf5_mutex(), at the start: whether x's rows can be read straight from the file, and if
  // so where each extent of rows starts (direct_fd open). HDF5 decides nothing per batch then: the
  // samples must be stored as in memory (no filter, the native type, whole rows per chunk) and
  // every chunk allocated, and the file have at most 2^24 rows. A first row read both ways must
  // agree, or the reads go through HDF5.
  bool plan_direct_reads(Part& p) {
    const int64_t n = p.rows();
    // The labels and checksums it keeps in memory: at most 128 MB.
    if (n > (int64_t{1} << 24)) return false;
    const hid_t x = p.file.x.get();
    const size_t row_bytes = this->row_bytes();
    h5::Id dcpl = h5::plist(H5Dget_create_plist(x));
    h5::Id type = h5::type(H5Dget_type(x));
    h5::Id fcpl = h5::plist(H5Fget_create_plist(p.file.file.get()));
    hsize_t user_block = 1;
    if (dcpl.get() < 0 || type.get() < 0 || fcpl.get() < 0 || H5Pget_nfilters(dcpl.get()) != 0 ||
        H5Tequal(type.get(), x_read_type(p)) <= 0 || H5Pget_userblock(fcpl.get(), &user_block) < 0 || user_block != 0)
      return false;
    const H5D_layout_t layout = H5Pget_layout(dcpl.get());
    if (layout == H5D_CONTIGUOUS) {
      const haddr_t offset = H5Dget_offset(x);
      if (offset == HADDR_UNDEF) return false;
      p.extent_rows = n;
      p.extent_offset.assign(1, offset);
    } else if (layout == H5D_CHUNKED) {
      std::vector<hsize_t> chunk(x_rank);
      if (H5Pget_chunk(dcpl.get(), static_cast<int>(x_rank), chunk.data()) != static_cast<int>(x_rank)) return false;
      for (size_t i = 1; i < x_rank; ++i)
        if (chunk[i] != static_cast<hsize_t>(info.sample_shape[i - 1])) return false;
      p.extent_rows = static_cast<int64_t>(chunk[0]);
      const auto extents = static_cast<hsize_t>((n + p.extent_rows - 1) / p.extent_rows);
      h5::Id all = h5::space(H5Dget_space(x));
      hsize_t chunks = 0;
      if (all.get() < 0 || H5Dget_num_chunks(x, all.get(), &chunks) < 0 || chunks != extents) return false;
      p.extent_offset.assign(extents, HADDR_UNDEF);
      std::vector<hsize_t> at(x_rank);
      for (hsize_t i = 0; i < chunks; ++i) {
        unsigned mask = 0;
        haddr_t address = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info(x, all.get(), i, at.data(), &mask, &address, &size) < 0 || address == HADDR_UNDEF ||
            at[0] % chunk[0] != 0 || at[0] / chunk[0] >= extents || size != chunk[0] * row_bytes)
          return false;
        p.extent_offset[at[0] / chunk[0]] = address;
      }
    } else {
      return false;
    }
    p.direct_fd = open(p.info.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (p.direct_fd < 0) return false;
    struct stat file_stat {};
    if (fstat(p.direct_fd, &file_stat) != 0) {
      close_direct(p);
      return false;
    }
    p.opened_bytes = static_cast<uint64_t>(file_stat.st_size);
    map_file(p);
    // Row 0 both ways.
    std::vector<unsigned char> through_hdf5(row_bytes), direct(row_bytes);
    std::vector<hsize_t> start(x_rank, 0), count(hs_count);
    count[0] = 1;
    h5::Id file_space = h5::space(H5Dget_space(x));
    h5::Id memory_space = h5::space(H5Screate_simple(static_cast<int>(x_rank), count.data(), nullptr));
    const bool same =
        file_space.get() >= 0 && memory_space.get() >= 0 &&
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) >= 0 &&
        H5Dread(x, x_read_type(p), memory_space.get(), file_space.get(), H5P_DEFAULT, through_hdf5.data()) >= 0 &&
        read_direct(p, direct.data(), row_bytes, p.extent_offset[0]) && through_hdf5 == direct;
    if (!same) close_direct(p);
    return same;
  }

  static void map_file(Part& p) {
    struct stat file_stat {};
    if (fstat(p.direct_fd, &file_stat) != 0 || file_stat.st_size <= 0) return;
    prepare_mapped_copies();
    void* at = mmap(nullptr, static_cast<size_t>(file_stat.st_size), PROT_READ, MAP_SHARED, p.direct_fd, 0);
    if (at == MAP_FAILED) return;  // pread then
    p.mapping = static_cast<const unsigned char*>(at);
    p.mapping_bytes = static_cast<size_t>(file_stat.st_size);
  }

  static void close_direct(Part& p) {
    if (p.mapping) munmap(const_cast<unsigned char*>(p.mapping), p.mapping_bytes);
    p.mapping = nullptr;
    if (p.direct_fd >= 0) close(p.direct_fd);
    p.direct_fd = -1;
  }

  // `bytes` from the file's `offset` into `to`: false where the file ends before them.
  static bool read_direct(const Part& p, unsigned char* to, size_t bytes, uint64_t offset) {
    if (!p.mapping) return pread_all(p, to, bytes, offset);
    if (offset > p.mapping_bytes || bytes > p.mapping_bytes - offset) return false;
    return copy_from_mapping(to, p.mapping + offset, bytes);
  }

  // A file cut short while the run reads it (rewritten in place) is named here: once a batch, and
  // after a read that found it short (a page of the mapping past the file's end, which would
  // otherwise be a SIGBUS: the file may be whole again by the time it is measured).
  static void check_file_size(const Part& p, int64_t epoch, int64_t batch, uint64_t read_ended_at = 0) {
    struct stat file_stat {};
    const bool measured = fstat(p.direct_fd, &file_stat) == 0;
    const bool shorter = measured && static_cast<uint64_t>(file_stat.st_size) < p.opened_bytes;
    if (!shorter && (read_ended_at == 0 || !p.mapping)) return;
    const std::string when = changed_since_opened(epoch, batch);
    if (shorter)
      throw DataError("data file '" + p.info.path + "' is now " + std::to_string(file_stat.st_size) + " bytes, was " +
                      std::to_string(p.opened_bytes) + when);
    throw DataError("data file '" + p.info.path + "' ended before byte " + std::to_string(read_ended_at) +
                    " while it was read, was " + std::to_string(p.opened_bytes) + " bytes" + when);
  }

  static bool pread_all(const Part& p, unsigned char* to, size_t bytes, uint64_t offset) {
    while (bytes > 0) {
      const ssize_t got = pread(p.direct_fd, to, bytes, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;  // a signal's handler ran on this thread
      if (got <= 0) return false;               // an error, or the file ends before the rows do
      to += got;
      bytes -= static_cast<size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
    return true;
  }

  // Under hdf5_mutex(): the labels and row checksums into all_y and all_crc, each in one read;
  // `why` ends an error's line.
  void load_labels(Part& p, const std::string& why) {
    const int64_t n = p.rows();
    p.all_y.resize(static_cast<size_t>(n));
    p.all_crc.resize(p.info.row_checksums ? static_cast<size_t>(n) : 0);
    if (H5Dread(p.file.y.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.all_y.data()) < 0)
      throw DataError(rows_error(p, 0, n - 1, 0, 0, opt.y_name) + why);
    if (p.info.row_checksums &&
        H5Dread(p.file.row_crc.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.all_crc.data()) < 0)
      throw DataError(rows_error(p, 0, n - 1, 0, 0, kRowChecksums) + why);
  }

  // The whole file into all_x, all_y and all_crc, each dataset in one read.
  void load_all(Part& p) {
    std::lock_guard lock(hdf5_mutex());
    h5::silence_errors();
    p.all_x.resize(static_cast<size_t>(p.rows()) * row_bytes());
    if (H5Dread(p.file.x.get(), x_read_type(p), H5S_ALL, H5S_ALL, H5P_DEFAULT, p.all_x.data()) < 0)
      throw DataError(rows_error(p, 0, p.rows() - 1, 0, 0, opt.x_name) + " (data.in_memory)");
    load_labels(p, " (data.in_memory)");
  }

  // Batch position j's label and checksum, of file row `row`, from all_y and all_crc.
  void take_labels(const Part& p, int64_t j, size_t row) {
    yraw[static_cast<size_t>(j)] = p.all_y[row];
    if (p.info.row_checksums) crcraw[static_cast<size_t>(j)] = p.all_crc[row];
  }

  // The file's row of position j of `order`.
  int64_t file_row(const Part& p, int64_t j) const { return order[static_cast<size_t>(j)].first - p.first; }

  // Reads the rows of positions [j0, j1) of `order` (sorted), all of file p, into raw and yraw
  // (and crcraw) at those positions.
  void read_sorted(Part& p, int64_t j0, int64_t j1, int64_t epoch, int64_t batch) {
    if (opt.in_memory) {
      const size_t row_bytes = this->row_bytes();
      for (int64_t j = j0; j < j1; ++j) {
        pause();
        const auto row = static_cast<size_t>(file_row(p, j));
        std::memcpy(raw.data() + static_cast<size_t>(j) * row_bytes, p.all_x.data() + row * row_bytes, row_bytes);
        take_labels(p, j, row);
      }
      return;
    }
    if (p.direct_fd >= 0) {
      // One read per run of consecutive rows inside one extent.
      check_file_size(p, epoch, batch);
      const size_t row_bytes = this->row_bytes();
      for (int64_t j = j0; j < j1;) {
        pause();
        const int64_t first = file_row(p, j), extent = first / p.extent_rows;
        int64_t e = j + 1;
        while (e < j1 && file_row(p, e) == first + (e - j) && file_row(p, e) / p.extent_rows == extent) ++e;
        const uint64_t offset =
            p.extent_offset[static_cast<size_t>(extent)] + static_cast<uint64_t>(first % p.extent_rows) * row_bytes;
        const size_t bytes = static_cast<size_t>(e - j) * row_bytes;
        if (!read_direct(p, raw.data() + static_cast<size_t>(j) * row_bytes, bytes, offset)) {
          check_file_size(p, epoch, batch, offset + bytes);
          throw DataError(rows_error(p, first, first + (e - j) - 1, epoch, batch, opt.x_name));
        }
        for (int64_t k = j; k < e; ++k) take_labels(p, k, static_cast<size_t>(file_row(p, k)));
        j = e;
      }
      return;
    }
    std::lock_guard lock(hdf5_mutex());
    h5::silence_errors();
    const hid_t xt = x_read_type(p);
    const hid_t fs = p.x_fspace.get(), ms = x_mspace.get();
    bool first_run = true;
    for (int64_t j = j0; j < j1;) {
      int64_t e = j + 1;
      while (e < j1 && file_row(p, e) == file_row(p, e - 1) + 1) ++e;
      hs_start[0] = static_cast<hsize_t>(file_row(p, j));
      hs_count[0] = static_cast<hsize_t>(e - j);
      if (opt.read_mode != ReadMode::Union) {  // Runs, and Direct where it cannot read directly
        ms_start[0] = static_cast<hsize_t>(j);
        if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, hs_start.data(), nullptr, hs_count.data(), nullptr) < 0 ||
            H5Sselect_hyperslab(ms, H5S_SELECT_SET, ms_start.data(), nullptr, hs_count.data(), nullptr) < 0 ||
            H5Dread(p.file.x.get(), xt, ms, fs, H5P_DEFAULT, raw.data()) < 0)
          throw DataError(rows_error(p, file_row(p, j), file_row(p, e - 1), epoch, batch, opt.x_name));
      } else {
        if (H5Sselect_hyperslab(fs, first_run ? H5S_SELECT_SET : H5S_SELECT_OR, hs_start.data(), nullptr,
                                hs_count.data(), nullptr) < 0)
          throw DataError(rows_error(p, file_row(p, j), file_row(p, e - 1), epoch, batch, opt.x_name));
      }
      first_run = false;
      j = e;
    }
    const int64_t first = file_row(p, j0), last = file_row(p, j1 - 1);
    if (opt.read_mode == ReadMode::Union) {
      ms_start[0] = static_cast<hsize_t>(j0);
      hs_count[0] = static_cast<hsize_t>(j1 - j0);
      if (H5Sselect_hyperslab(ms, H5S_SELECT_SET, ms_start.data(), nullptr, hs_count.data(), nullptr) < 0 ||
          H5Dread(p.file.x.get(), xt, ms, fs, H5P_DEFAULT, raw.data()) < 0)
        throw DataError(rows_error(p, first, last, epoch, batch, opt.x_name));
    }
    // Labels: one point selection of the same rows.
    for (int64_t j = j0; j < j1; ++j) ycoords[static_cast<size_t>(j - j0)] = static_cast<hsize_t>(file_row(p, j));
    const hsize_t mstart = static_cast<hsize_t>(j0), mcount = static_cast<hsize_t>(j1 - j0);
    if (H5Sselect_elements(p.y_fspace.get(), H5S_SELECT_SET, static_cast<size_t>(j1 - j0), ycoords.data()) < 0 ||
        H5Sselect_hyperslab(y_mspace.get(), H5S_SELECT_SET, &mstart, nullptr, &mcount, nullptr) < 0 ||
        H5Dread(p.file.y.get(), H5T_NATIVE_INT32, y_mspace.get(), p.y_fspace.get(), H5P_DEFAULT, yraw.data()) < 0)
      throw DataError(rows_error(p, first, last, epoch, batch, opt.y_name));
    if (p.info.row_checksums && H5Dread(p.file.row_crc.get(), H5T_NATIVE_UINT32, y_mspace.get(), p.y_fspace.get(),
                                        H5P_DEFAULT, crcraw.data()) < 0)
      throw DataError(rows_error(p, first, last, epoch, batch, kRowChecksums));
  }
};

ShardedReader::ShardedReader(const ReaderOptions& options) : impl_(std::make_unique<Impl>()) {
  try {
    init(options);
  } catch (...) {
    impl_->close_hdf5();
    throw;
  }
}

void ShardedReader::init(const ReaderOptions& options) {
  Impl& d = *impl_;
  d.opt = options;
  const ReaderOptions& o = d.opt;
  if (o.world < 1) throw ConfigError("world size " + std::to_string(o.world) + " is invalid, expected at least 1");
  if (o.rank < 0 || o.rank >= o.world)
    throw ConfigError("rank " + std::to_string(o.rank) + " is out of range for world size " + std::to_string(o.world));
  if (o.global_batch < 1)
    throw ConfigError("train.global_batch = " + std::to_string(o.global_batch) + " is invalid, expected at least 1");
  if (o.global_batch % o.world != 0)
    throw ConfigError("train.global_batch = " + std::to_string(o.global_batch) +
                      " is not divisible by the world size " + std::to_string(o.world));
  if (o.prefetch_depth < 1)
    throw ConfigError("data.prefetch_depth = " + std::to_string(o.prefetch_depth) + " is invalid, expected at least 1");

  const std::vector<std::string> paths = expand_data_files(o.path);
  d.parts.resize(paths.size());
  {
    std::lock_guard lock(hdf5_mutex());
    h5::silence_errors();
    // The chunk cache is shared out among the files, so memory does not grow with their number.
    const size_t cache_bytes = o.chunk_cache_bytes / paths.size();
    int64_t first = 0;
    for (size_t f = 0; f < paths.size(); ++f) {
      Impl::Part& p = d.parts[f];
      // Open once without a cache to learn the chunk size, then with the cache sized for it.
      DatasetInfo probe;
      { h5::Opened opened = h5::open_validated(paths[f], o.x_name, o.y_name, probe); }
      const int64_t numel = shape_numel(probe.sample_shape);
      const size_t elem = probe.x_type == "uint8" ? 1 : 4;
      const size_t chunk_bytes =
          probe.x_chunk.empty() ? numel * elem : static_cast<size_t>(shape_numel(probe.x_chunk)) * elem;
      h5::Id dapl = h5::plist(H5Pcreate(H5P_DATASET_ACCESS));
      H5Pset_chunk_cache(dapl.get(), chunk_cache_slots(cache_bytes, chunk_bytes), cache_bytes, 0.75);
      p.file = h5::open_validated(paths[f], o.x_name, o.y_name, p.info, dapl.get());
      p.x_fspace = h5::space(H5Dget_space(p.file.x.get()));
      p.y_fspace = h5::space(H5Dget_space(p.file.y.get()));
      p.first = first;
      first += p.rows();
    }
    std::vector<DatasetInfo> infos;
    for (const Impl::Part& p : d.parts) infos.push_back(p.info);
    d.info = sample_set_info(o.path, infos);
    d.x_rank = d.info.sample_shape.size() + 1;
    d.hs_start.assign(d.x_rank, 0);
    d.hs_count.assign(d.x_rank, 0);
    d.ms_start.assign(d.x_rank, 0);
    for (size_t i = 1; i < d.x_rank; ++i) d.hs_count[i] = static_cast<hsize_t>(d.info.sample_shape[i - 1]);
  }

  d.n = d.info.num_samples;
  d.numel = shape_numel(d.info.sample_shape);
  d.local = o.global_batch / o.world;
  if (o.drop_last && d.n < o.global_batch)
    throw DataError("data file '" + o.path + "' has " + std::to_string(d.n) +
                    " samples, fewer than one global batch of " + std::to_string(o.global_batch));
  d.bpe = o.drop_last ? d.n / o.global_batch : (d.n + o.global_batch - 1) / o.global_batch;
  d.u8 = d.info.x_type == "uint8";
  for (Impl::Part& p : d.parts) {
    {
      std::lock_guard lock(hdf5_mutex());
      h5::Id stored = h5::type(H5Dget_type(p.file.x.get()));
      if (stored && H5Tequal(stored.get(), d.u8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT) <= 0)
        p.x_stored_type = std::move(stored);
    }
    // Per channel when the file gives per-channel statistics, else one channel over the sample.
    std::vector<float> means{p.info.normalized_attrs ? p.info.mean : 0.0f},
        stds{p.info.normalized_attrs ? p.info.stddev : 1.0f};
    if (!p.info.channel_mean.empty()) {
      means = p.info.channel_mean;
      stds = p.info.channel_std;
    }
    p.channels = static_cast<int64_t>(means.size());
    p.channel_numel = d.numel / p.channels;
    p.lut.resize(static_cast<size_t>(p.channels) * 256);
    for (int64_t c = 0; c < p.channels; ++c) {
      const float m = means[static_cast<size_t>(c)], sd = stds[static_cast<size_t>(c)];
      p.mean.push_back(m);
      p.inv_std.push_back(1.0f / sd);
      for (int v = 0; v < 256; ++v) {
        const float scaled = static_cast<float>(v) / 255.0f;
        p.lut[static_cast<size_t>(c * 256 + v)] = p.info.normalized_attrs ? (scaled - m) / sd : scaled;
      }
      p.pad_value.push_back(d.u8 ? p.lut[static_cast<size_t>(c * 256)] : (0.0f - m) * (1.0f / sd));
    }
  }
  if (o.augment.any()) {
    if (d.info.sample_shape.size() != 3)
      throw ConfigError("data.augment needs samples of shape [C, H, W], but data file '" + o.path +
                        "' has samples of shape " + shape_string(d.info.sample_shape));
    d.height = d.info.sample_shape[1];
    d.width = d.info.sample_shape[2];
    d.normalised.resize(static_cast<size_t>(d.numel));
  }

  {
    std::lock_guard lock(hdf5_mutex());
    std::vector<hsize_t> xm(d.hs_count);
    xm[0] = static_cast<hsize_t>(d.local);
    const hsize_t ym = static_cast<hsize_t>(d.local);
    d.x_mspace = h5::space(H5Screate_simple(static_cast<int>(xm.size()), xm.data(), nullptr));
    d.y_mspace = h5::space(H5Screate_simple(1, &ym, nullptr));
  }
  d.slots.resize(static_cast<size_t>(o.prefetch_depth) + 1);
  for (auto& s : d.slots) {
    if (o.allocate_slot) {
      MGT_CHECK(o.release_slot != nullptr, Error, "ReaderOptions: allocate_slot without release_slot");
      const size_t bytes = static_cast<size_t>(d.local * d.numel) * sizeof(float);
      s.memory = std::shared_ptr<void>(o.allocate_slot(bytes), o.release_slot);
      s.x = Tensor::view(static_cast<float*>(s.memory.get()), Shape{d.local * d.numel});
    } else {
      s.x = Tensor(Shape{d.local * d.numel});
    }
    s.y.assign(static_cast<size_t>(d.local), 0);
  }
  d.raw.resize(static_cast<size_t>(d.local) * d.row_bytes());
  for (Impl::Part& p : d.parts) {
    if (o.in_memory) {
      d.load_all(p);
    } else if (o.read_mode == ReadMode::Direct) {
      std::lock_guard lock(hdf5_mutex());
      h5::silence_errors();
      if (d.plan_direct_reads(p)) d.load_labels(p, "");
    }
    // Every label before the first batch, not when its row comes up steps and checkpoints later.
    if (p.all_y.empty()) {
      class_counts(p.info);
    } else {
      for (size_t row = 0; row < p.all_y.size(); ++row)
        if (p.all_y[row] < 0 || p.all_y[row] >= p.info.num_classes)
          throw DataError(label_error(p.info, static_cast<int64_t>(row), p.all_y[row]));
    }
  }
  d.order.reserve(static_cast<size_t>(d.local));
  d.ycoords.resize(static_cast<size_t>(d.local));
  d.yraw.resize(static_cast<size_t>(d.local));
  const bool checksums =
      std::any_of(d.parts.begin(), d.parts.end(), [](const Impl::Part& p) { return p.info.row_checksums; });
  d.crcraw.resize(checksums ? static_cast<size_t>(d.local) : 0);
}

ShardedReader::~ShardedReader() {
  impl_->stop();
  if (impl_->shares_core) IdleCore::release(impl_.get());
  impl_->close_hdf5();
}

const DatasetInfo& ShardedReader::info() const { return impl_->info; }
int64_t ShardedReader::batches_per_epoch() const { return impl_->bpe; }
int64_t ShardedReader::local_batch() const { return impl_->local; }
bool ShardedReader::reads_directly() const {
  return std::all_of(impl_->parts.begin(), impl_->parts.end(), [](const Impl::Part& p) { return p.direct_fd >= 0; });
}

void ShardedReader::start(int64_t epoch, int64_t batch_in_epoch) {
  Impl& d = *impl_;
  if (epoch < 0 || batch_in_epoch < 0 || batch_in_epoch > d.bpe)
    throw DataError("data file '" + d.opt.path + "': cannot start at epoch " + std::to_string(epoch) + ", batch " +
                    std::to_string(batch_in_epoch) +
                    "; expected epoch >= 0 and 0 <= batch <= " + std::to_string(d.bpe));
  if (batch_in_epoch == d.bpe) {
    batch_in_epoch = 0;
    ++epoch;
  }
  d.stop();
  if (d.opt.share_core && !d.shares_core) d.shares_core = IdleCore::claim(&d);
  d.filled = d.released = d.handed = 0;
  d.produced.store(0);
  d.error = nullptr;
  d.error_at = -1;
  d.started = true;
  d.start_epoch = epoch;
  d.start_batch = batch_in_epoch;
  d.fiber = d.shares_core && IdleCore::start_worker(
                                 &d, [](void* impl) { static_cast<Impl*>(impl)->run_from_start(); }, &d);
  if (!d.fiber) d.thread = std::thread([&d] { d.run_from_start(); });
}

Batch ShardedReader::next() {
  Impl& d = *impl_;
  if (!d.started) start(0, 0);
  std::unique_lock lk(d.m);
  if (d.handed > d.released) {
    d.released = d.handed;
    d.cv.notify_all();
    if (d.fiber) IdleCore::wake(&d);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto ready = [&] { return d.filled > d.handed || (d.error && d.error_at == d.handed); };
  if (!ready() && d.fiber) {
    // The batch is not read yet: the reader has the core until it is.
    struct Wanted {
      const std::atomic<int64_t>& produced;
      int64_t batch;
    } const wanted{d.produced, d.handed};
    lk.unlock();
    IdleCore::wait_for_worker(
        &d,
        [](const void* w) {
          const auto& wanted = *static_cast<const Wanted*>(w);
          return wanted.produced.load(std::memory_order_acquire) > wanted.batch;
        },
        &wanted);
    lk.lock();
    // Only this thread runs the fiber: waiting on would wait for ever.
    MGT_CHECK(ready(), Error,
              "data file '" + d.opt.path + "': the reader's batch is owed to the thread that started it");
  }
  d.cv.wait(lk, ready);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (d.filled <= d.handed) std::rethrow_exception(d.error);
  Impl::Slot& s = d.slots[static_cast<size_t>(d.handed) % d.slots.size()];
  ++d.handed;
  lk.unlock();

  Batch b;
  Shape shape{s.rows};
  shape.insert(shape.end(), d.info.sample_shape.begin(), d.info.sample_shape.end());
  b.x = Tensor::view(s.x.data(), std::move(shape));
  b.y = s.y.data();
  b.rows = s.rows;
  b.epoch = s.epoch;
  b.batch_in_epoch = s.batch;
  b.first_sample = static_cast<int64_t>(d.opt.rank) * d.local;
  b.wait_seconds = waited;
  return b;
}

}  // namespace mgt::data
