// The vector kernels of tree_outer_products, written once over a vector type `Vec` and included
// by tree_outer_products.cpp once per instruction set, inside that set's namespace and
// `#pragma GCC target` region (which is why this header has no include guard): each copy is
// compiled for its own instructions only and runs only where the CPU has them.
//
// The includer defines, before including (besides kMaxLevels, kRegisterTreeMaxRows and
// workspace(floats), shared by both copies):
//   struct Vec           width W, types V (a vector) and M (a lane mask), and zero, load,
//                        masked load, broadcast, fma, add, store and masked store;
//   kBlockRows           output rows (o) a register block holds;
//   kBlockVectors        vectors of output columns (i) a register block holds.
//
// Every output element gets exactly the reference's operations in the reference's order (a
// leaf per shard summed over its rows by fused multiply-adds from +0, leaves merged in the
// balanced tree): blocking decides only which elements are computed together and where partial
// sums wait (registers or memory, which keep a float's bits), so the bits are the reference's.

constexpr int64_t kBlockColumns = Vec::W * kBlockVectors;

// ---- Strategy 1: the whole tree in registers, for passes whose rows stay in cache -------------
// Per block of kBlockRows x kBlockColumns outputs, every shard's leaf is summed in registers and
// merged into the tree at once; the shards' rows of a column stripe of x are read once per block.

template <int Rows, int Vectors, bool Tail>
void register_tree_block(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                         int64_t o0, int64_t i0, float* dst) {
  using V = typename Vec::V;
  typename Vec::M mask[Vectors];
#pragma GCC unroll 8
  for (int v = 0; v < Vectors; ++v) mask[v] = Vec::mask(in - i0 - Vec::W * v);
  V level_sum[kMaxLevels][Rows][Vectors];
  bool occupied[kMaxLevels] = {};
  for (int64_t s = 0; s < shards; ++s) {
    const float* g = dy + s * rows * out + o0;  // dy_s[r, o0 ..]: the block's factors of row r
    const float* x_r = x + s * rows * in + i0;
    V sum[Rows][Vectors];
#pragma GCC unroll 8
    for (int k = 0; k < Rows; ++k)
#pragma GCC unroll 8
      for (int v = 0; v < Vectors; ++v) sum[k][v] = Vec::zero();
    for (int64_t r = 0; r < rows; ++r, g += out, x_r += in) {
      V xv[Vectors];
#pragma GCC unroll 8
      for (int v = 0; v < Vectors; ++v)
        xv[v] = Tail ? Vec::load(x_r + Vec::W * v, mask[v]) : Vec::load(x_r + Vec::W * v);
#pragma GCC unroll 8
      for (int k = 0; k < Rows; ++k) {
        const V factor = Vec::broadcast(g + k);
#pragma GCC unroll 8
        for (int v = 0; v < Vectors; ++v) sum[k][v] = Vec::fma(factor, xv[v], sum[k][v]);
      }
    }
    // A finished subtree merges with the earlier sibling of its size: left + right.
    int level = 0;
    for (; occupied[level]; ++level) {
#pragma GCC unroll 8
      for (int k = 0; k < Rows; ++k)
#pragma GCC unroll 8
        for (int v = 0; v < Vectors; ++v) sum[k][v] = Vec::add(level_sum[level][k][v], sum[k][v]);
      occupied[level] = false;
    }
#pragma GCC unroll 8
    for (int k = 0; k < Rows; ++k)
#pragma GCC unroll 8
      for (int v = 0; v < Vectors; ++v) level_sum[level][k][v] = sum[k][v];
    occupied[level] = true;
  }
  int top = 0;
  while (!occupied[top]) ++top;
  for (int k = 0; k < Rows; ++k)
    for (int v = 0; v < Vectors; ++v) {
      float* d = dst + (o0 + k) * in + i0 + Vec::W * v;
      if (Tail)
        Vec::store(d, level_sum[top][k][v], mask[v]);
      else
        Vec::store(d, level_sum[top][k][v]);
    }
}

// The rows o0 .. out-1 that do not fill a block: one block of exactly that many rows.
template <int Rows, int Vectors, bool Tail>
void register_tree_rest(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                        int64_t o0, int64_t i0, float* dst) {
  if constexpr (Rows > 0) {
    if (out - o0 == Rows)
      register_tree_block<Rows, Vectors, Tail>(dy, x, shards, rows, out, in, o0, i0, dst);
    else
      register_tree_rest<Rows - 1, Vectors, Tail>(dy, x, shards, rows, out, in, o0, i0, dst);
  }
}

// A stripe of Vectors vectors of columns (the last stripe of a row may need fewer than a block's).
template <int Vectors, bool Tail>
void register_tree_stripe(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in,
                          int64_t i0, float* dst) {
  if constexpr (Vectors > 1) {
    if (in - i0 <= (Vectors - 1) * Vec::W) {
      register_tree_stripe<Vectors - 1, Tail>(dy, x, shards, rows, out, in, i0, dst);
      return;
    }
  }
  int64_t o0 = 0;
  for (; o0 + kBlockRows <= out; o0 += kBlockRows)
    register_tree_block<kBlockRows, Vectors, Tail>(dy, x, shards, rows, out, in, o0, i0, dst);
  register_tree_rest<kBlockRows - 1, Vectors, Tail>(dy, x, shards, rows, out, in, o0, i0, dst);
}

void register_tree(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in, float* dst) {
  // Column stripes outside, so that the stripe of x stays in cache while every block of output
  // rows uses it.
  int64_t i0 = 0;
  for (; i0 + kBlockColumns <= in; i0 += kBlockColumns)
    register_tree_stripe<kBlockVectors, false>(dy, x, shards, rows, out, in, i0, dst);
  if (i0 < in) register_tree_stripe<kBlockVectors, true>(dy, x, shards, rows, out, in, i0, dst);
}

// ---- Strategy 2: leaves in memory, a chunk of rows at a time, for passes of many rows -----------
// A shard's leaf [out_padded, in_padded] is summed kChunkRows rows at a time: the chunk's stripe of
// x stays in L1 while every block of output rows uses it, and the block's partial sums wait in
// the leaf between chunks. Finished leaves merge into the tree in memory.

constexpr int64_t kChunkRows = 128;
constexpr int64_t kPanelRows = 512;  // output rows whose leaves are summed together

// leaf[Rows x kBlockColumns, row stride ld] = (first ? +0 : leaf) + the chunk's rows in order;
// packed holds the chunk's factors of this block, kBlockRows per row (zero past `out`).
template <int Vectors, bool Tail>
void leaf_tile(const float* packed, const float* x, int64_t chunk, int64_t in, int64_t i0, bool first, float* leaf,
               int64_t ld) {
  using V = typename Vec::V;
  typename Vec::M mask[Vectors];
#pragma GCC unroll 8
  for (int v = 0; v < Vectors; ++v) mask[v] = Vec::mask(in - i0 - Vec::W * v);
  V sum[kBlockRows][Vectors];
#pragma GCC unroll 8
  for (int k = 0; k < kBlockRows; ++k)
#pragma GCC unroll 8
    for (int v = 0; v < Vectors; ++v) sum[k][v] = first ? Vec::zero() : Vec::load(leaf + k * ld + Vec::W * v);
  const float* x_r = x + i0;
  for (int64_t r = 0; r < chunk; ++r, x_r += in, packed += kBlockRows) {
    V xv[Vectors];
#pragma GCC unroll 8
    for (int v = 0; v < Vectors; ++v) xv[v] = Tail ? Vec::load(x_r + Vec::W * v, mask[v]) : Vec::load(x_r + Vec::W * v);
#pragma GCC unroll 8
    for (int k = 0; k < kBlockRows; ++k) {
      const V factor = Vec::broadcast(packed + k);
#pragma GCC unroll 8
      for (int v = 0; v < Vectors; ++v) sum[k][v] = Vec::fma(factor, xv[v], sum[k][v]);
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < kBlockRows; ++k)
#pragma GCC unroll 8
    for (int v = 0; v < Vectors; ++v) Vec::store(leaf + k * ld + Vec::W * v, sum[k][v]);
}

// Every block of output rows over one stripe of columns, Vectors vectors wide (the last stripe of
// a row may need fewer than a block's).
template <int Vectors, bool Tail>
void leaf_stripe(const float* packed, const float* x, int64_t chunk, int64_t in, int64_t i0, bool first, float* leaf,
                 int64_t ld, int64_t blocks) {
  if constexpr (Vectors > 1) {
    if (in - i0 <= (Vectors - 1) * Vec::W) {
      leaf_stripe<Vectors - 1, Tail>(packed, x, chunk, in, i0, first, leaf, ld, blocks);
      return;
    }
  }
  for (int64_t b = 0; b < blocks; ++b)
    leaf_tile<Vectors, Tail>(packed + b * kChunkRows * kBlockRows, x, chunk, in, i0, first,
                             leaf + b * kBlockRows * ld + i0, ld);
}

// The workspace leaves_in_memory needs, in floats: the packed factors of one chunk, one leaf, and
// one leaf per level of the tree.
struct LeafLayout {
  int64_t blocks, out_padded, in_padded, levels;
  LeafLayout(int64_t shards, int64_t out, int64_t in)
      : blocks((out + kBlockRows - 1) / kBlockRows),
        out_padded(blocks * kBlockRows),
        in_padded((in + kBlockColumns - 1) / kBlockColumns * kBlockColumns),
        levels(1) {
    while ((int64_t{1} << (levels - 1)) < shards) ++levels;
  }
  int64_t leaf_floats() const { return out_padded * in_padded; }
  int64_t packed_floats() const { return blocks * kChunkRows * kBlockRows; }
  int64_t workspace_floats() const { return packed_floats() + (levels + 1) * leaf_floats(); }
};

// Output rows out of dy's ld_dy columns (a panel of the whole layer: dy points at its first).
void leaves_in_memory(const float* dy, int64_t ld_dy, const float* x, int64_t shards, int64_t rows, int64_t out,
                      int64_t in, float* dst, float* workspace) {
  const LeafLayout layout(shards, out, in);
  const int64_t n = layout.leaf_floats(), ld = layout.in_padded;
  float* packed = workspace;
  // levels + 1 leaf buffers: the one being summed and one per occupied level of the tree; a merge
  // frees the left sibling's buffer, and a finished subtree takes its level by pointer.
  float* free_buffers[kMaxLevels + 1];
  int free_count = 0;
  for (int64_t l = 0; l <= layout.levels; ++l) free_buffers[free_count++] = packed + layout.packed_floats() + l * n;
  float* level_sum[kMaxLevels];
  bool occupied[kMaxLevels] = {};
  for (int64_t s = 0; s < shards; ++s) {
    float* leaf = free_buffers[--free_count];
    const float* dy_s = dy + s * rows * ld_dy;
    const float* x_s = x + s * rows * in;
    if (rows == 0)
      for (int64_t j = 0; j < n; ++j) leaf[j] = 0.0f;
    for (int64_t c0 = 0; c0 < rows; c0 += kChunkRows) {
      const int64_t chunk = rows - c0 < kChunkRows ? rows - c0 : kChunkRows;
      // The chunk's dy by blocks of output rows: block b's factors of row r at (b * kChunkRows + r) *
      // kBlockRows, written in order (a block at a time: writing a row at a time strides 4 KB).
      for (int64_t b = 0; b < layout.blocks; ++b) {
        const int64_t o0 = b * kBlockRows, width = out - o0 < kBlockRows ? out - o0 : kBlockRows;
        const float* d = dy_s + c0 * ld_dy + o0;
        float* p = packed + b * kChunkRows * kBlockRows;
        for (int64_t r = 0; r < chunk; ++r, d += ld_dy, p += kBlockRows) {
          if (width == kBlockRows) {
#pragma GCC unroll 8
            for (int64_t k = 0; k < kBlockRows; ++k) p[k] = d[k];
          } else {
            for (int64_t k = 0; k < kBlockRows; ++k) p[k] = k < width ? d[k] : 0.0f;
          }
        }
      }
      const float* x_c = x_s + c0 * in;
      int64_t i0 = 0;
      for (; i0 + kBlockColumns <= in; i0 += kBlockColumns)
        leaf_stripe<kBlockVectors, false>(packed, x_c, chunk, in, i0, c0 == 0, leaf, ld, layout.blocks);
      if (i0 < in) leaf_stripe<kBlockVectors, true>(packed, x_c, chunk, in, i0, c0 == 0, leaf, ld, layout.blocks);
    }
    int level = 0;
    for (; occupied[level]; ++level) {
      const float* left = level_sum[level];
      for (int64_t j = 0; j < n; ++j) leaf[j] = left[j] + leaf[j];
      free_buffers[free_count++] = level_sum[level];
      occupied[level] = false;
    }
    level_sum[level] = leaf;
    occupied[level] = true;
  }
  int top = 0;
  while (!occupied[top]) ++top;
  const float* sum = level_sum[top];
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) dst[o * in + i] = sum[o * ld + i];
}

void run(const float* dy, const float* x, int64_t shards, int64_t rows, int64_t out, int64_t in, float* dst) {
  if (shards * rows <= kRegisterTreeMaxRows) {
    register_tree(dy, x, shards, rows, out, in, dst);
    return;
  }
  // Panels of output rows bound the leaves' memory (one per level of the tree, plus one) for a
  // wide layer: a vocabulary's head would otherwise hold several copies of its gradient.
  const int64_t panel = out < kPanelRows ? out : kPanelRows;
  float* buffer = workspace(LeafLayout(shards, panel, in).workspace_floats());
  for (int64_t o0 = 0; o0 < out; o0 += panel) {
    const int64_t rows_here = out - o0 < panel ? out - o0 : panel;
    leaves_in_memory(dy + o0, out, x, shards, rows, rows_here, in, dst + o0 * in, buffer);
  }
}
