// my_ops::identity_conv_op's kernel, torch-free: the full ops library (identity_conv_cpu.cpp, ATen's threads) and
// its lite build (identity_conv_lite.cpp, the lite runtime's threads) both call it. The copy moves elements by
// their size, so one kernel serves every dtype.
#pragma once

#include <algorithm>
#include <utility>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace my_ops::kernels {

// Elements per parallel task: large enough that thread start-up does not dominate.
constexpr int64_t kCopyGrain = 1 << 15;
// Bytes below which a dense copy stays on one thread (measured: waking threads costs more than they save).
constexpr int64_t kParallelCopyBytes = 1 << 21;

// n elements of item bytes each; parallel_for(begin, end, grain, f) runs f(b, e) over [begin, end).
template <class ParallelFor>
void copy_dense(const void* src, void* dst, int64_t n, int64_t item, ParallelFor&& parallel_for) {
  const int64_t grain = n * item < kParallelCopyBytes ? n : kCopyGrain;
  parallel_for(int64_t{0}, n, grain, [&](int64_t begin, int64_t end) {
    std::memcpy(static_cast<char*>(dst) + begin * item, static_cast<const char*>(src) + begin * item,
                static_cast<size_t>((end - begin) * item));
  });
}

template <typename Item, class ParallelFor>
void copy_strided_items(const void* src, const int64_t* sizes, const int64_t* is, void* dst, const int64_t* os,
                        ParallelFor&& parallel_for) {
  const int64_t C = sizes[1], H = sizes[2], W = sizes[3];
  const Item* s0 = static_cast<const Item*>(src);
  Item* d0 = static_cast<Item*>(dst);
  const int64_t rows = sizes[0] * C * H;
  const int64_t grain = std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(W, 1));
  parallel_for(int64_t{0}, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t h = r % H, c = (r / H) % C, n = r / (H * C);
      const Item* s = s0 + n * is[0] + c * is[1] + h * is[2];
      Item* d = d0 + n * os[0] + c * os[1] + h * os[2];
      for (int64_t w = 0; w < W; ++w) d[w * os[3]] = s[w * is[3]];
    }
  });
}

// Any 4-D strides on either side (in elements); one task per (n, c, h) row. item: 2, 4 or 8 bytes (the callers'
// dtype checks).
template <class ParallelFor>
void copy_strided(const void* src, const int64_t* sizes, const int64_t* src_strides, void* dst,
                  const int64_t* dst_strides, int64_t item, ParallelFor&& parallel_for) {
  switch (item) {
    case 2: return copy_strided_items<uint16_t>(src, sizes, src_strides, dst, dst_strides, parallel_for);
    case 4: return copy_strided_items<uint32_t>(src, sizes, src_strides, dst, dst_strides, parallel_for);
    case 8: return copy_strided_items<uint64_t>(src, sizes, src_strides, dst, dst_strides, parallel_for);
    default: throw std::invalid_argument("identity_conv: elements of " + std::to_string(item) + " bytes");
  }
}

// Whether strides describe a dense, non-overlapping layout of sizes (ATen's is_non_overlapping_and_dense).
inline bool dense(const int64_t* sizes, const int64_t* strides, int64_t dim) {
  int64_t order[8];
  int64_t m = 0;
  for (int64_t d = 0; d < dim && d < 8; ++d)
    if (sizes[d] != 1) order[m++] = d;
  for (int64_t i = 1; i < m; ++i)  // by stride, ascending (a few dims: insertion)
    for (int64_t j = i; j > 0 && strides[order[j]] < strides[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
  int64_t expected = 1;
  for (int64_t i = 0; i < m; ++i) {
    if (strides[order[i]] != expected) return false;
    expected *= sizes[order[i]];
  }
  return true;
}

// The op: out = x elementwise (out made as empty_like(x) makes it: x's strides when x is dense).
template <class ParallelFor>
void identity_conv(const void* src, const int64_t* sizes, const int64_t* src_strides, void* dst,
                   const int64_t* dst_strides, int64_t item, ParallelFor&& parallel_for) {
  int64_t numel = 1;
  for (int d = 0; d < 4; ++d) numel *= sizes[d];
  if (numel == 0) return;
  if (std::equal(src_strides, src_strides + 4, dst_strides) && dense(sizes, src_strides, 4)) {
    copy_dense(src, dst, numel, item, parallel_for);  // one block of memory, the same order on both sides
    return;
  }
  copy_strided(src, sizes, src_strides, dst, dst_strides, item, parallel_for);
}

}  // namespace my_ops::kernels
