#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/vector_math.hpp"

// std::fma needs the FMA extension to vectorize, which GCC's "avx512f" and "avx2" clones do not
// enable: the whole x86-64-v4 (AVX-512) and v3 (AVX2 + FMA) levels do. The baseline clone calls
// libm's fmaf, which gives the same bits, slowly.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MGT_FMA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MGT_FMA_CLONES
#endif
#define MGT_ALWAYS_INLINE inline __attribute__((always_inline))

namespace mgt::kernels {
namespace {

// A tile is kQueryBlock queries by up to kKeyBlock keys; a causal tile ends at the diagonal, its
// keys rounded up to kKeyStep. Scores, packed operands and accumulators stay in L1 and L2. The
// sizes are part of the results' definition: the online softmax rescales once per kKeyBlock keys.
constexpr int64_t kQueryBlock = 32;
constexpr int64_t kKeyBlock = 128;
constexpr int64_t kKeyStep = 32;
static_assert(kKeyBlock % kKeyStep == 0 && kQueryBlock % kKeyStep == 0);
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// g++'s generic vectors, for the transposes: lowered to each clone's own instructions.
typedef float Floats16 __attribute__((vector_size(64)));
typedef int32_t Ints16 __attribute__((vector_size(64)));

// e^x as exp_vectorizable (vector_math.hpp) forms it, its polynomial in fused multiply-adds:
// half the operations, within 2 ulp as well. std::fma rounds once wherever it runs, so every
// clone gives the same bits.
MGT_ALWAYS_INLINE float exp_fused(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = std::fma(x, 1.44269504088896341f, kRound) - kRound;
  const float r = std::fma(-n, 1.428606765330187045e-06f, std::fma(-n, 0.693145751953125f, x));
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// C[r, 0..W) = (or +=) sum over i of A(r, i) B[i, 0..W) for R rows, A(r, i) at a[r * ars + i * acs]
// (a transposed A is a pair of strides). The accumulators stay in registers; each element adds
// its products in the order i = 0, 1, ..., whatever R and W are.
template <int R, int W>
MGT_ALWAYS_INLINE void product_block(const float* __restrict a, int64_t ars, int64_t acs, const float* __restrict b,
                                     int64_t ldb, float* __restrict c, int64_t ldc, int64_t depth, bool accumulate) {
  float acc[R][W];
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) acc[r][w] = accumulate ? c[r * ldc + w] : 0.0f;
  for (int64_t i = 0; i < depth; ++i) {
    const float* bi = b + i * ldb;
    for (int r = 0; r < R; ++r) {
      const float x = a[r * ars + i * acs];
      for (int w = 0; w < W; ++w) acc[r][w] = std::fma(x, bi[w], acc[r][w]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) c[r * ldc + w] = acc[r][w];
}

// Rows of one column strip of W, R rows at a time, the rest in halves of R.
template <int R, int W>
MGT_ALWAYS_INLINE void product_rows(int64_t rows, const float* a, int64_t ars, int64_t acs, const float* b, int64_t ldb,
                                    float* c, int64_t ldc, int64_t depth, bool accumulate) {
  int64_t r = 0;
  for (; r + R <= rows; r += R) product_block<R, W>(a + r * ars, ars, acs, b, ldb, c + r * ldc, ldc, depth, accumulate);
  if constexpr (R > 1) {
    if (r < rows) product_rows<R / 2, W>(rows - r, a + r * ars, ars, acs, b, ldb, c + r * ldc, ldc, depth, accumulate);
  }
}

// C[rows, cols] = (or +=) A B, A(r, i) = a[r * ars + i * acs], B [depth, cols] in rows of ldb; cols
// a multiple of 32. Strips as wide as cols allows, with 16 vector accumulators for AVX-512.
// (Strips of 16 are left out: g++ 12 vectorizes those across the rows instead, ten times slower.)
MGT_ALWAYS_INLINE void product(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t ars, int64_t acs,
                               const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (cols % 64 == 0) {
    for (int64_t j = 0; j < cols; j += 64)
      product_rows<4, 64>(rows, a, ars, acs, b + j, ldb, c + j, ldc, depth, accumulate);
  } else {
    for (int64_t j = 0; j < cols; j += 32)
      product_rows<8, 32>(rows, a, ars, acs, b + j, ldb, c + j, ldc, depth, accumulate);
  }
}

// y[0..n) = scale * x[0..n), whole vectors first.
MGT_ALWAYS_INLINE void scaled_copy(float* __restrict y, const float* __restrict x, int64_t n, float scale) {
  int64_t d = 0;
  for (; d + 16 <= n; d += 16)
    for (int64_t l = 0; l < 16; ++l) y[d + l] = x[d + l] * scale;
  for (; d < n; ++d) y[d] = x[d] * scale;
}

// One head's operands copied out of the token rows (x, rows of ld, the head's head_dim columns),
// times `scale`, into zero-padded blocks: [padded_tokens, width] or transposed [width, padded_tokens].
MGT_ALWAYS_INLINE void pack_rows(const float* x, int64_t ld, int64_t tokens, int64_t head_dim, float scale, float* y,
                                 int64_t padded_tokens, int64_t width) {
  for (int64_t r = 0; r < tokens; ++r) {
    float* o = y + r * width;
    scaled_copy(o, x + r * ld, head_dim, scale);
    for (int64_t d = head_dim; d < width; ++d) o[d] = 0.0f;
  }
  std::memset(y + tokens * width, 0, static_cast<size_t>((padded_tokens - tokens) * width) * sizeof(float));
}

// The transpose of 16 rows of 16 (x, rows ld apart) times scale into y (rows ldy apart), in
// registers: four rounds of two-vector shuffles, round b exchanging blocks of 2^b between rows
// 2^b apart. g++ turns each shuffle into one permute (AVX-512) or a few (AVX2).
template <int kRound>
MGT_ALWAYS_INLINE void exchange_blocks(Floats16 (&r)[16]) {
  constexpr int kSpan = 1 << kRound;
  Ints16 first, second;
  for (int c = 0; c < 16; ++c) {
    const bool odd = (c >> kRound) & 1;
    first[c] = odd ? 16 + c - kSpan : c;
    second[c] = odd ? 16 + c : c + kSpan;
  }
  for (int i = 0; i < 16; ++i) {
    if ((i >> kRound) & 1) continue;
    const Floats16 a = r[i], b = r[i + kSpan];
    r[i] = __builtin_shuffle(a, b, first);
    r[i + kSpan] = __builtin_shuffle(a, b, second);
  }
}

MGT_ALWAYS_INLINE void transpose16(const float* x, int64_t ld, float scale, float* y, int64_t ldy) {
  Floats16 r[16];
  for (int i = 0; i < 16; ++i) {
    std::memcpy(&r[i], x + i * ld, sizeof r[i]);
    r[i] *= scale;
  }
  exchange_blocks<0>(r);
  exchange_blocks<1>(r);
  exchange_blocks<2>(r);
  exchange_blocks<3>(r);
  for (int i = 0; i < 16; ++i) std::memcpy(y + i * ldy, &r[i], sizeof r[i]);
}

MGT_ALWAYS_INLINE void pack_transposed(const float* x, int64_t ld, int64_t tokens, int64_t head_dim, float scale,
                                       float* y, int64_t padded_tokens, int64_t width) {
  const int64_t whole_tokens = tokens / 16 * 16, whole_dims = head_dim / 16 * 16;
  for (int64_t r = 0; r < whole_tokens; r += 16)
    for (int64_t d = 0; d < whole_dims; d += 16)
      transpose16(x + r * ld + d, ld, scale, y + d * padded_tokens + r, padded_tokens);
  for (int64_t d = 0; d < width; ++d) {
    float* o = y + d * padded_tokens;
    const int64_t done = d < whole_dims ? whole_tokens : 0;
    if (d < head_dim) {
      for (int64_t r = done; r < tokens; ++r) o[r] = x[r * ld + d] * scale;
    } else {
      for (int64_t r = 0; r < tokens; ++r) o[r] = 0.0f;
    }
    for (int64_t r = tokens; r < padded_tokens; ++r) o[r] = 0.0f;
  }
}

// A tile's scores are kept transposed, S^T [keys, queries], so that every per-query statistic
// (maximum, sum, log-sum-exp, D) is a vector across the tile's queries and no row is reduced
// across its lanes. Masked scores become -infinity: keys past the sequence's end, and with the
// causal mask keys after the query.
MGT_ALWAYS_INLINE void mask_scores(const AttentionShape& s, int64_t i0, int64_t j0, int64_t keys, float* st) {
  const bool past_end = j0 + keys > s.tokens;
  const bool straddles = s.causal && j0 + keys - 1 > i0;
  if (!past_end && !straddles) return;
  for (int64_t j = 0; j < keys; ++j) {
    float* row = st + j * kQueryBlock;
    const int64_t key = j0 + j;
    // Queries before first_seen do not see this key.
    const int64_t first_seen = key >= s.tokens ? kQueryBlock : (s.causal ? key - i0 : 0);
    if (first_seen <= 0) continue;
    for (int64_t i = 0; i < kQueryBlock; ++i) row[i] = i < first_seen ? kMinusInfinity : row[i];
  }
}

// The tiles of the query block at i0: the keys it sees, in blocks from j0 = 0 (the last one
// ending at the diagonal when causal, rounded up to kKeyStep).
MGT_ALWAYS_INLINE int64_t keys_end(const AttentionShape& s, int64_t i0) {
  return s.causal ? std::min(s.tokens, i0 + kQueryBlock) : s.tokens;
}
MGT_ALWAYS_INLINE int64_t tile_keys(int64_t end, int64_t j0) {
  return std::min(kKeyBlock, round_up(end - j0, kKeyStep));
}

// The scratch of one head, carved from the workspace. Tokens are padded with zeros to whole
// blocks of queries and key steps, so that every tile is computed whole and its padding
// contributes nothing.
struct HeadScratch {
  int64_t padded_tokens = 0, width = 0;  // tokens rounded up to kQueryBlock, head_dim to 32
  float* q = nullptr;                    // backward: [padded_tokens, width], scale * Q
  float* qt = nullptr;                   // [width, padded_tokens]: scale * Q^T
  float* k = nullptr;                    // [padded_tokens, width]
  float* v = nullptr;                    // [padded_tokens, width]
  float* dout = nullptr;                 // backward: [padded_tokens, width]
  float* doutt = nullptr;                // backward: [width, padded_tokens]: dO^T
  float* dk = nullptr;                   // backward: [padded_tokens, width]
  float* dv = nullptr;                   // backward: [padded_tokens, width]
  float* o = nullptr;                    // [kQueryBlock, width]: a query block's output so far, or dQ
  float* scores = nullptr;               // [kKeyBlock, kQueryBlock]: S^T, then P^T
  float* dscores = nullptr;              // backward: [kKeyBlock, kQueryBlock]: dP^T, then dS^T
  float* stats = nullptr;                // backward: lse and D [2, padded_tokens]

  // Sets the fields from `base` (when not null) and returns the floats they take.
  size_t carve(const AttentionShape& s, float* base) {
    padded_tokens = round_up(std::max<int64_t>(s.tokens, 1), kQueryBlock);
    width = round_up(std::max<int64_t>(s.head_dim, 1), 32);
    const int64_t tw = padded_tokens * width;
    size_t total = 0;
    auto take = [&](float*& field, int64_t n) {
      field = base ? base + total : nullptr;
      total += static_cast<size_t>(round_up(n, 16));  // 64-byte aligned pieces
    };
    take(q, tw);
    take(qt, tw);
    take(k, tw);
    take(v, tw);
    take(dout, tw);
    take(doutt, tw);
    take(dk, tw);
    take(dv, tw);
    take(o, kQueryBlock * width);
    take(scores, kKeyBlock * kQueryBlock);
    take(dscores, kKeyBlock * kQueryBlock);
    take(stats, 2 * padded_tokens);
    return total;
  }
};

// The next sample's rows (its queries, keys and values, and in backward its output, the output's
// gradient and the rows the input gradient goes to) brought into the caches while this sample
// computes, a few lines before each product. The pass moves about 12 bytes per flop it does not
// skip, and a head's columns are too short a piece of each token's row for the hardware
// prefetchers to run far enough ahead; spread out, the transfers overlap the products.
class NextSample {
 public:
  void add(const float* first, int64_t floats, bool written) {
    from_[count_] = reinterpret_cast<const char*>(first);
    bytes_[count_] = floats * static_cast<int64_t>(sizeof(float));
    written_[count_] = written;
    ++count_;
  }
  // Spreads the lines over `calls` calls of fetch().
  void spread(int64_t calls) {
    int64_t lines = 0;
    for (int i = 0; i < count_; ++i) lines += (bytes_[i] + 63) / 64;
    per_call_ = calls > 0 ? (lines + calls - 1) / calls : lines;
  }
  MGT_ALWAYS_INLINE void fetch() {
    for (int64_t n = 0; n < per_call_ && at_ < count_; ++n) {
      if (written_[at_])
        __builtin_prefetch(from_[at_] + offset_, 1);
      else
        __builtin_prefetch(from_[at_] + offset_, 0);
      offset_ += 64;
      if (offset_ >= bytes_[at_]) {
        ++at_;
        offset_ = 0;
      }
    }
  }

 private:
  const char* from_[4] = {};
  int64_t bytes_[4] = {};
  bool written_[4] = {};
  int count_ = 0, at_ = 0;
  int64_t offset_ = 0, per_call_ = 0;
};

// S^T = K (scale Q)^T for the tile of keys j0.. and queries i0.., masked: forward computes it, and
// backward again instead of keeping the probabilities.
MGT_ALWAYS_INLINE void tile_scores(const AttentionShape& s, const HeadScratch& h, int64_t i0, int64_t j0, int64_t keys,
                                   float* st) {
  product(keys, kQueryBlock, h.width, h.k + j0 * h.width, h.width, 1, h.qt + i0, h.padded_tokens, st, kQueryBlock,
          false);
  mask_scores(s, i0, j0, keys, st);
}

// The tile's scores in place become exp(score - m) per query, masked ones 0; with `sums`, each
// query's values are added to its sum in key order.
MGT_ALWAYS_INLINE void exponentiate(float* st, int64_t keys, const float* m, float* sums) {
  for (int64_t j = 0; j < keys; ++j) {
    float* p = st + j * kQueryBlock;
    for (int64_t i = 0; i < kQueryBlock; ++i) {
      const float e = exp_fused(p[i] - m[i]);
      p[i] = p[i] == kMinusInfinity ? 0.0f : e;
      if (sums) sums[i] += p[i];
    }
  }
}

// One (sample, head): q, k, v point at the head's first column of the sample's first row.
MGT_ALWAYS_INLINE void forward_head(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                                    float* lse, const HeadScratch& h, NextSample& next) {
  const int64_t t = s.tokens, hd = s.head_dim, w = h.width, tp = h.padded_tokens;
  pack_transposed(q, s.ld, t, hd, s.scale, h.qt, tp, w);
  pack_rows(k, s.ld, t, hd, 1.0f, h.k, tp, w);
  pack_rows(v, s.ld, t, hd, 1.0f, h.v, tp, w);
  // Each query's running maximum and sum of exp(score - maximum), the tile's maxima and the
  // rescaling of what came before: local, so that they stay in registers.
  float m[kQueryBlock], l[kQueryBlock], mb[kQueryBlock], alpha[kQueryBlock];
  for (int64_t i0 = 0; i0 < t; i0 += kQueryBlock) {
    const int64_t end = keys_end(s, i0);
    for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
      // S^T = K (scale Q)^T for the tile, then the online softmax: each query's maximum so far, P^T
      // against it, the sum so far rescaled when the maximum grew, and the output with it.
      const int64_t keys = tile_keys(end, j0);
      float* st = h.scores;
      next.fetch();
      tile_scores(s, h, i0, j0, keys, st);
      for (int64_t i = 0; i < kQueryBlock; ++i) mb[i] = st[i];
      for (int64_t j = 1; j < keys; ++j)
        for (int64_t i = 0; i < kQueryBlock; ++i)
          mb[i] = st[j * kQueryBlock + i] > mb[i] ? st[j * kQueryBlock + i] : mb[i];
      const bool first = j0 == 0;
      for (int64_t i = 0; i < kQueryBlock; ++i) {
        const float grown = first ? mb[i] : (mb[i] > m[i] ? mb[i] : m[i]);
        alpha[i] = first ? 0.0f : exp_fused(m[i] - grown);
        m[i] = grown;
        l[i] = first ? 0.0f : l[i] * alpha[i];
      }
      exponentiate(st, keys, m, l);
      if (!first)
        for (int64_t i = 0; i < kQueryBlock; ++i) {
          float* o = h.o + i * w;
          for (int64_t d = 0; d < w; ++d) o[d] *= alpha[i];
        }
      // O += P V: P(i, j) = P^T[j, i].
      next.fetch();
      product(kQueryBlock, w, keys, st, 1, kQueryBlock, h.v + j0 * w, w, h.o, w, !first);
    }
    const int64_t rows = std::min(kQueryBlock, t - i0);
    for (int64_t i = 0; i < rows; ++i) {
      scaled_copy(out + (i0 + i) * s.ld_out, h.o + i * w, hd, 1.0f / l[i]);
      lse[i0 + i] = m[i] + std::log(l[i]);
    }
  }
}

MGT_ALWAYS_INLINE void backward_head(const AttentionShape& s, const float* q, const float* k, const float* v,
                                     const float* out, const float* dout, const float* lse, float* dq, float* dk,
                                     float* dv, const HeadScratch& h, NextSample& next) {
  const int64_t t = s.tokens, hd = s.head_dim, w = h.width, tp = h.padded_tokens;
  pack_rows(q, s.ld, t, hd, s.scale, h.q, tp, w);
  pack_transposed(q, s.ld, t, hd, s.scale, h.qt, tp, w);
  pack_rows(k, s.ld, t, hd, 1.0f, h.k, tp, w);
  pack_rows(v, s.ld, t, hd, 1.0f, h.v, tp, w);
  pack_rows(dout, s.ld_out, t, hd, 1.0f, h.dout, tp, w);
  pack_transposed(dout, s.ld_out, t, hd, 1.0f, h.doutt, tp, w);
  float* row_lse = h.stats;
  float* row_d = h.stats + tp;  // D = rowsum(dO * O): softmax's backward term per query
  for (int64_t i = 0; i < tp; ++i) {
    row_lse[i] = i < t ? lse[i] : 0.0f;
    row_d[i] = i < t ? lane_dot(h.dout + i * w, out + i * s.ld_out, hd) : 0.0f;
  }
  std::memset(h.dk, 0, static_cast<size_t>(tp * w) * sizeof(float));
  std::memset(h.dv, 0, static_cast<size_t>(tp * w) * sizeof(float));
  for (int64_t i0 = 0; i0 < t; i0 += kQueryBlock) {
    const int64_t end = keys_end(s, i0);
    float* dq_block = h.o;
    for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
      const int64_t keys = tile_keys(end, j0);
      // P^T = exp(S^T - lse) for the tile, from the saved statistics.
      float* pt = h.scores;
      next.fetch();
      tile_scores(s, h, i0, j0, keys, pt);
      exponentiate(pt, keys, row_lse + i0, nullptr);
      // dV_j += P^T dO_i
      next.fetch();
      product(keys, w, kQueryBlock, pt, kQueryBlock, 1, h.dout + i0 * w, w, h.dv + j0 * w, w, true);
      // dP^T = V_j dO_i^T, then dS^T = P^T (dP^T - D)
      float* dst = h.dscores;
      next.fetch();
      product(keys, kQueryBlock, w, h.v + j0 * w, w, 1, h.doutt + i0, tp, dst, kQueryBlock, false);
      const float* d = row_d + i0;
      for (int64_t j = 0; j < keys; ++j) {
        const float* p = pt + j * kQueryBlock;
        float* ds = dst + j * kQueryBlock;
        for (int64_t i = 0; i < kQueryBlock; ++i) ds[i] = p[i] * (ds[i] - d[i]);
      }
      // dQ_i += dS K_j (scaled when written); dK_j += dS^T (scale Q_i)
      next.fetch();
      product(kQueryBlock, w, keys, dst, 1, kQueryBlock, h.k + j0 * w, w, dq_block, w, j0 != 0);
      next.fetch();
      product(keys, w, kQueryBlock, dst, kQueryBlock, 1, h.q + i0 * w, w, h.dk + j0 * w, w, true);
    }
    const int64_t rows = std::min(kQueryBlock, t - i0);
    for (int64_t i = 0; i < rows; ++i) scaled_copy(dq + (i0 + i) * s.ld, dq_block + i * w, hd, s.scale);
  }
  for (int64_t j = 0; j < t; ++j) {
    scaled_copy(dk + j * s.ld, h.dk + j * w, hd, 1.0f);
    scaled_copy(dv + j * s.ld, h.dv + j * w, hd, 1.0f);
  }
}

// Tiles per head: forward runs 2 products per tile, backward 5.
int64_t tiles_per_head(const AttentionShape& s) {
  int64_t n = 0;
  for (int64_t i0 = 0; i0 < s.tokens; i0 += kQueryBlock) n += (keys_end(s, i0) + kKeyBlock - 1) / kKeyBlock;
  return n;
}

MGT_FMA_CLONES
void forward_heads(const AttentionShape& s, const float* q, const float* k, const float* v, float* out, float* row_lse,
                   const HeadScratch& h) {
  const int64_t in_rows = s.tokens * s.ld, out_rows = s.tokens * s.ld_out;
  for (int64_t b = 0; b < s.batch; ++b) {
    NextSample next;
    if (b + 1 < s.batch) {
      next.add(q + (b + 1) * in_rows, in_rows, false);
      next.add(out + (b + 1) * out_rows, out_rows, true);
    }
    next.spread(2 * tiles_per_head(s) * s.heads);
    for (int64_t head = 0; head < s.heads; ++head) {
      const int64_t in = b * in_rows + head * s.head_dim;
      forward_head(s, q + in, k + in, v + in, out + b * out_rows + head * s.head_dim,
                   row_lse + (b * s.heads + head) * s.tokens, h, next);
    }
  }
}

MGT_FMA_CLONES
void backward_heads(const AttentionShape& s, const float* q, const float* k, const float* v, const float* out,
                    const float* dout, const float* row_lse, float* dq, float* dk, float* dv, const HeadScratch& h) {
  const int64_t in_rows = s.tokens * s.ld, out_rows = s.tokens * s.ld_out;
  for (int64_t b = 0; b < s.batch; ++b) {
    NextSample next;
    if (b + 1 < s.batch) {
      next.add(q + (b + 1) * in_rows, in_rows, false);
      next.add(out + (b + 1) * out_rows, out_rows, false);
      next.add(dout + (b + 1) * out_rows, out_rows, false);
      next.add(dq + (b + 1) * in_rows, in_rows, true);
    }
    next.spread(5 * tiles_per_head(s) * s.heads);
    for (int64_t head = 0; head < s.heads; ++head) {
      const int64_t in = b * in_rows + head * s.head_dim;
      const int64_t o = b * out_rows + head * s.head_dim;
      backward_head(s, q + in, k + in, v + in, out + o, dout + o, row_lse + (b * s.heads + head) * s.tokens, dq + in,
                    dk + in, dv + in, h, next);
    }
  }
}

}  // namespace

size_t attention_workspace(const AttentionShape& shape) { return HeadScratch().carve(shape, nullptr) * sizeof(float); }

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                       float* row_lse, void* workspace) {
  if (s.batch <= 0 || s.tokens <= 0 || s.heads <= 0) return;
  HeadScratch h;
  h.carve(s, static_cast<float*>(workspace));
  forward_heads(s, q, k, v, out, row_lse, h);
}

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v, const float* out,
                        const float* dout, const float* row_lse, float* dq, float* dk, float* dv, void* workspace) {
  if (s.batch <= 0 || s.tokens <= 0 || s.heads <= 0) return;
  HeadScratch h;
  h.carve(s, static_cast<float*>(workspace));
  backward_heads(s, q, k, v, out, dout, row_lse, dq, dk, dv, h);
}

}  // namespace mgt::kernels
