// Kernels for the ops a lite model library leaves to its runtime (what inductor does not generate itself):
// products and convolutions. Each returns exactly the sizes and strides ATen's would, which the model library's
// generated code indexes by.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "guard.h"
#include "tensor.h"

using namespace pt2rt::lite;

namespace {

void require_float32(const ShimTensor& t, const char* what) {
  if (t.dtype != kFloat32)
    throw std::invalid_argument(std::string(what) + " has dtype code " + std::to_string(t.dtype) +
                                "; lite's kernels take float32");
}

typedef float v4 __attribute__((vector_size(16)));  // the baseline's vector width (SSE2, NEON)

inline v4 load4(const float* p) {
  v4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// sum_p a[p] b[p] over contiguous rows, four vector accumulators
float dot(const float* a, const float* b, int64_t k) {
  v4 s0{}, s1{}, s2{}, s3{};
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    s0 += load4(a + p) * load4(b + p);
    s1 += load4(a + p + 4) * load4(b + p + 4);
    s2 += load4(a + p + 8) * load4(b + p + 8);
    s3 += load4(a + p + 12) * load4(b + p + 12);
  }
  const v4 s = (s0 + s1) + (s2 + s3);
  float r = (s[0] + s[1]) + (s[2] + s[3]);
  for (; p < k; ++p) r += a[p] * b[p];
  return r;
}

// acc[r][j] += sum_k a[r][k] w[k][j] for r < rows, k < kk, j < cols (rows a_ld, w_ld, acc_ld apart): 4 rows by
// NV vectors of L lanes at a time in registers, the rest one row and column at a time. Inlined into one function
// per instruction set (below), which chooses its vectors' width.
template <int L, int NV>
[[gnu::always_inline]] inline void tile_product_impl(const float* a, int64_t a_ld, int64_t kk, const float* w,
                                                      int64_t w_ld, float* acc, int64_t acc_ld, int64_t rows,
                                                      int64_t cols) {
  typedef float vf __attribute__((vector_size(L * sizeof(float))));
  constexpr int64_t kWidth = L * NV;
  const int64_t r4 = rows / 4 * 4, cw = cols / kWidth * kWidth;
  for (int64_t r = 0; r < r4; r += 4)
    for (int64_t j = 0; j < cw; j += kWidth) {
      vf c[4][NV];
      for (int i = 0; i < 4; ++i)
        for (int v = 0; v < NV; ++v) std::memcpy(&c[i][v], acc + (r + i) * acc_ld + j + v * L, sizeof(vf));
      const float* a0 = a + r * a_ld;
      for (int64_t k = 0; k < kk; ++k) {
        vf wv[NV];
        for (int v = 0; v < NV; ++v) std::memcpy(&wv[v], w + k * w_ld + j + v * L, sizeof(vf));
        for (int i = 0; i < 4; ++i) {
          const vf x = vf{} + a0[i * a_ld + k];
          for (int v = 0; v < NV; ++v) c[i][v] += x * wv[v];
        }
      }
      for (int i = 0; i < 4; ++i)
        for (int v = 0; v < NV; ++v) std::memcpy(acc + (r + i) * acc_ld + j + v * L, &c[i][v], sizeof(vf));
    }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = r < r4 ? cw : 0;
    if (from == cols) continue;
    float* row = acc + r * acc_ld;
    for (int64_t k = 0; k < kk; ++k) {
      const float x = a[r * a_ld + k];
      const float* wk = w + k * w_ld;
      for (int64_t j = from; j < cols; ++j) row[j] += x * wk[j];
    }
  }
}

using TileProduct = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, int64_t, int64_t);

void tile_product_baseline(const float* a, int64_t a_ld, int64_t kk, const float* w, int64_t w_ld, float* acc,
                           int64_t acc_ld, int64_t rows, int64_t cols) {
  tile_product_impl<4, 2>(a, a_ld, kk, w, w_ld, acc, acc_ld, rows, cols);  // SSE2, NEON: 8 of 16 registers
}

#if defined(__x86_64__)
[[gnu::target("avx2,fma")]] void tile_product_avx2(const float* a, int64_t a_ld, int64_t kk, const float* w,
                                                   int64_t w_ld, float* acc, int64_t acc_ld, int64_t rows,
                                                   int64_t cols) {
  tile_product_impl<8, 2>(a, a_ld, kk, w, w_ld, acc, acc_ld, rows, cols);  // 8 of 16 registers
}

[[gnu::target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]] void tile_product_avx512(
    const float* a, int64_t a_ld, int64_t kk, const float* w, int64_t w_ld, float* acc, int64_t acc_ld, int64_t rows,
    int64_t cols) {
  tile_product_impl<16, 4>(a, a_ld, kk, w, w_ld, acc, acc_ld, rows, cols);  // 16 of 32 registers
}
#endif

// The widest this CPU runs; $PT2RT_LITE_KERNELS (baseline, avx2, avx512) narrows it, for tests of each path.
TileProduct pick_tile_product() {
  const char* want = std::getenv("PT2RT_LITE_KERNELS");
  const std::string asked = want ? want : "";
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  if (avx512 && (asked.empty() || asked == "avx512")) return tile_product_avx512;
  if (avx2 && (asked.empty() || asked == "avx512" || asked == "avx2")) return tile_product_avx2;
#endif
  return tile_product_baseline;
}

void tile_product(const float* a, int64_t a_ld, int64_t kk, const float* w, int64_t w_ld, float* acc, int64_t acc_ld,
                  int64_t rows, int64_t cols) {
  static const TileProduct chosen = pick_tile_product();
  chosen(a, a_ld, kk, w, w_ld, acc, acc_ld, rows, cols);
}

// `w` rearranged by pack() for a kernel: once per constant (kept on its storage, keyed by `kind` and the view),
// per call for anything else.
template <class Pack>
std::shared_ptr<const std::vector<float>> packed(const ShimTensor& w, std::vector<int64_t> kind, Pack pack) {
  if (!w.storage->constant) return std::make_shared<const std::vector<float>>(pack());
  kind.push_back(w.offset);
  kind.insert(kind.end(), w.sizes.begin(), w.sizes.end());
  kind.insert(kind.end(), w.strides.begin(), w.strides.end());
  std::lock_guard<std::mutex> lock(w.storage->pack_mutex);
  auto& slot = w.storage->packs[kind];
  if (!slot) slot = std::make_shared<const std::vector<float>>(pack());
  return slot;
}

constexpr int64_t kParallelWork = int64_t{1} << 15;  // multiply-adds below which a product stays on one thread
constexpr int64_t kTile = 32, kColumnBlock = 64;     // 32 x 64 accumulators: 8 KB, in L1

// c[i, j] = (accumulate ? c[i, j] : 0) + alpha sum_k a[i, k] b[k, j] over strided float32 matrices; c's rows
// contiguous. b in column panels (packed once where it is a constant: a linear layer's weight), a tile of a's rows
// and a panel at a time.
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const ShimTensor& b_tensor,
          float* c, int64_t c_rs, float alpha, bool accumulate) {
  // b in panels of kColumnBlock columns, each [k][kColumnBlock] contiguous (zeros past n)
  const int64_t blocks = (n + kColumnBlock - 1) / kColumnBlock;
  const auto b_panels = packed(b_tensor, {3}, [&] {
    const float* b = static_cast<const float*>(b_tensor.data());
    const int64_t b_rs = b_tensor.strides[0], b_cs = b_tensor.strides[1];
    std::vector<float> out(static_cast<std::size_t>(blocks * k * kColumnBlock), 0.0f);
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = blk * kColumnBlock; j < std::min(n, (blk + 1) * kColumnBlock); ++j)
          out[(blk * k + p) * kColumnBlock + j - blk * kColumnBlock] = b[p * b_rs + j * b_cs];
    return out;
  });
  const float* panels = b_panels->data();
  const int64_t tiles = (m + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (m * n * k >= kParallelWork)
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t i0 = t * kTile, rows = std::min(kTile, m - i0);
      const int64_t j0 = blk * kColumnBlock, cols = std::min(kColumnBlock, n - j0);
      float acc[kTile * kColumnBlock] = {};
      const float* at = a + i0 * a_rs;
      int64_t a_ld = a_rs;
      std::vector<float> gathered;
      if (a_cs != 1) {  // a's rows gathered contiguous
        gathered.resize(static_cast<std::size_t>(rows * k));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t p = 0; p < k; ++p) gathered[r * k + p] = at[r * a_rs + p * a_cs];
        at = gathered.data();
        a_ld = k;
      }
      tile_product(at, a_ld, k, panels + blk * k * kColumnBlock, kColumnBlock, acc, kColumnBlock, rows, cols);
      for (int64_t r = 0; r < rows; ++r) {
        float* ci = c + (i0 + r) * c_rs + j0;
        const float* ar = acc + r * kColumnBlock;
        if (accumulate)
          for (int64_t j = 0; j < cols; ++j) ci[j] += alpha * ar[j];
        else
          for (int64_t j = 0; j < cols; ++j) ci[j] = alpha * ar[j];
      }
    }
}

void check_matrix(const ShimTensor& t, const char* what) {
  require_float32(t, what);
  if (t.dim() != 2) throw std::invalid_argument(std::string(what) + " is not a matrix");
}

// out = beta * self (broadcast to out) + alpha * mat1 @ mat2
void addmm(ShimTensor& out, const ShimTensor* self, const ShimTensor& mat1, const ShimTensor& mat2, float beta, float alpha) {
  check_matrix(out, "addmm's out");
  check_matrix(mat1, "addmm's mat1");
  check_matrix(mat2, "addmm's mat2");
  const int64_t m = mat1.sizes[0], k = mat1.sizes[1], n = mat2.sizes[1];
  if (mat2.sizes[0] != k || out.sizes[0] != m || out.sizes[1] != n)
    throw std::invalid_argument("addmm: sizes do not agree");
  if (out.strides[1] != 1 && n > 1) throw std::invalid_argument("addmm: out's rows are not contiguous");
  float* c = static_cast<float*>(out.data());
  const int64_t c_rs = out.strides[0];
  bool accumulate = false;
  if (self != nullptr && beta != 0.0f) {
    require_float32(*self, "addmm's self");
    // self broadcasts from the right: [n], [1, n], [m, n], [m, 1], [1, 1] or []
    const int64_t sd = self->dim();
    const int64_t s_rs = sd == 2 && self->sizes[0] != 1 ? self->strides[0] : 0;
    const int64_t s_cs = sd >= 1 && self->sizes[sd - 1] != 1 ? self->strides[sd - 1] : 0;
    const float* s = static_cast<const float*>(self->data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * c_rs + j] = beta * s[i * s_rs + j * s_cs];
    accumulate = true;
  }
  gemm(m, n, k, static_cast<const float*>(mat1.data()), mat1.strides[0], mat1.strides[1], mat2, c, c_rs, alpha,
       accumulate);
}

std::unique_ptr<ShimTensor> convolution(const ShimTensor& input, const ShimTensor& weight, const ShimTensor* bias,
                                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                    const std::vector<int64_t>& dilation, int64_t groups) {
  require_float32(input, "convolution's input");
  require_float32(weight, "convolution's weight");
  const int64_t spatial = input.dim() - 2;
  if (spatial < 1 || spatial > 2 || weight.dim() != input.dim())
    throw std::invalid_argument("lite's convolution takes 1-d and 2-d convolutions, got input of rank " +
                                std::to_string(input.dim()));
  // a 1-d convolution as a 2-d one of height 1
  auto at = [&](const std::vector<int64_t>& v, int64_t d, int64_t fill) {
    if (spatial == 1) return d == 0 ? fill : v.at(v.size() == 1 ? 0 : static_cast<std::size_t>(d - 1));
    return v.at(v.size() == 1 ? 0 : static_cast<std::size_t>(d));
  };
  const int64_t n = input.sizes[0], c_in = input.sizes[1];
  const int64_t h = spatial == 2 ? input.sizes[2] : 1, w = input.sizes[spatial + 1];
  const int64_t c_out = weight.sizes[0], c_per = weight.sizes[1];
  const int64_t kh = spatial == 2 ? weight.sizes[2] : 1, kw = weight.sizes[spatial + 1];
  const int64_t sh = at(stride, 0, 1), sw = at(stride, 1, 1);
  const int64_t ph = at(padding, 0, 0), pw = at(padding, 1, 0);
  const int64_t dh = at(dilation, 0, 1), dw = at(dilation, 1, 1);
  if (groups < 1 || c_in != c_per * groups || c_out % groups != 0)
    throw std::invalid_argument("convolution: channels do not agree with groups");
  if (h + 2 * ph < dh * (kh - 1) + 1 || w + 2 * pw < dw * (kw - 1) + 1)
    throw std::invalid_argument("convolution: the kernel is larger than the padded input");
  const int64_t oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  const int64_t ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  if (oh < 1 || ow < 1) throw std::invalid_argument("convolution: the kernel is larger than the padded input");

  std::vector<int64_t> sizes = spatial == 2 ? std::vector<int64_t>{n, c_out, oh, ow}
                                            : std::vector<int64_t>{n, c_out, ow};
  std::vector<int64_t> strides = (spatial == 2 && (is_channels_last_2d(input) || is_channels_last_2d(weight)))
                                     ? std::vector<int64_t>{oh * ow * c_out, 1, ow * c_out, c_out}
                                     : contiguous_strides(sizes);
  auto out = empty_strided(sizes, strides, kFloat32);

  auto s4 = [&](const ShimTensor& t, int64_t d) {  // stride of dim d of the 2-d view
    if (spatial == 2) return t.strides[d];
    return d == 2 ? int64_t{0} : t.strides[d == 3 ? 2 : d];
  };
  const int64_t xs[4] = {s4(input, 0), s4(input, 1), s4(input, 2), s4(input, 3)};
  const int64_t ys[4] = {s4(*out, 0), s4(*out, 1), s4(*out, 2), s4(*out, 3)};
  const float* x = static_cast<const float*>(input.data());
  const float* wt = static_cast<const float*>(weight.data());
  float* y = static_cast<float*>(out->data());
  const int64_t oc_per = c_out / groups;
  std::vector<float> b(static_cast<std::size_t>(c_out), 0.0f);
  if (bias != nullptr) {
    require_float32(*bias, "convolution's bias");
    const float* bp = static_cast<const float*>(bias->data());
    for (int64_t oc = 0; oc < c_out; ++oc) b[oc] = bp[oc * bias->strides[0]];
  }
  // Padding: the depthwise path skips its taps, as oneDNN (eager's CPU convolutions) does; the product path
  // multiplies zeros, so there an inf or NaN weight reaches the border outputs where eager's would not.
  if (c_per == 1 && oc_per == 1) {
    // depthwise: per output pixel, all channels at once; weights as [tap][channel]
    const int64_t taps = kh * kw, c = c_out;
    const auto wk_packed = packed(weight, {1, kh, kw}, [&] {
      std::vector<float> wk(static_cast<std::size_t>(taps * c));
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t ky = 0; ky < kh; ++ky)
          for (int64_t kx = 0; kx < kw; ++kx)
            wk[(ky * kw + kx) * c + ch] = wt[ch * s4(weight, 0) + ky * s4(weight, 2) + kx * s4(weight, 3)];
      return wk;
    });
    const std::vector<float>& wk = *wk_packed;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t in = 0; in < n; ++in)
      for (int64_t oy = 0; oy < oh; ++oy) {
        std::vector<float> acc(static_cast<std::size_t>(c)), col(static_cast<std::size_t>(c));
        for (int64_t ox = 0; ox < ow; ++ox) {
          std::copy(b.begin(), b.end(), acc.begin());
          for (int64_t ky = 0; ky < kh; ++ky) {
            const int64_t iy = oy * sh - ph + ky * dh;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t ix = ox * sw - pw + kx * dw;
              const float* wv = wk.data() + (ky * kw + kx) * c;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const float* xp = x + in * xs[0] + iy * xs[2] + ix * xs[3];
              if (xs[1] == 1) {
                for (int64_t ch = 0; ch < c; ++ch) acc[ch] += xp[ch] * wv[ch];
              } else {
                for (int64_t ch = 0; ch < c; ++ch) col[ch] = xp[ch * xs[1]];
                for (int64_t ch = 0; ch < c; ++ch) acc[ch] += col[ch] * wv[ch];
              }
            }
          }
          float* yp = y + in * ys[0] + oy * ys[2] + ox * ys[3];
          for (int64_t ch = 0; ch < c; ++ch) yp[ch * ys[1]] = acc[ch];
        }
      }
    return out;
  }
  // otherwise a product per group: output pixels x (input channels x taps) times (input channels x taps) x output
  // channels, the input gathered a tile of pixels at a time, the weights packed as [group][k][output channel]
  const int64_t kk = c_per * kh * kw, pixels = oh * ow;
  const auto wp_packed = packed(weight, {2, groups, kh, kw}, [&] {
    std::vector<float> wp(static_cast<std::size_t>(groups * kk * oc_per));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t j = 0; j < oc_per; ++j)
        for (int64_t ic = 0; ic < c_per; ++ic)
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx)
              wp[((g * kk) + (ic * kh + ky) * kw + kx) * oc_per + j] =
                  wt[(g * oc_per + j) * s4(weight, 0) + ic * s4(weight, 1) + ky * s4(weight, 2) + kx * s4(weight, 3)];
    return wp;
  });
  const std::vector<float>& wp = *wp_packed;
  const int64_t tiles = (pixels + kTile - 1) / kTile;
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t in = 0; in < n; ++in)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t p0 = t * kTile, p1 = std::min(pixels, p0 + kTile);
        std::vector<float> col(static_cast<std::size_t>(kTile * kk)), acc(static_cast<std::size_t>(kTile * kColumnBlock));
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t oy = p / ow, ox = p % ow;
          float* cp = col.data() + (p - p0) * kk;
          for (int64_t ic = 0; ic < c_per; ++ic)
            for (int64_t ky = 0; ky < kh; ++ky) {
              const int64_t iy = oy * sh - ph + ky * dh;
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t ix = ox * sw - pw + kx * dw;
                *cp++ = iy < 0 || iy >= h || ix < 0 || ix >= w
                            ? 0.0f
                            : x[in * xs[0] + (g * c_per + ic) * xs[1] + iy * xs[2] + ix * xs[3]];
              }
            }
        }
        // a block of output channels at a time for the whole tile: each weight row is read once per tile
        const float* wg = wp.data() + g * kk * oc_per;
        const int64_t rows = p1 - p0;
        for (int64_t j0 = 0; j0 < oc_per; j0 += kColumnBlock) {
          const int64_t nj = std::min(kColumnBlock, oc_per - j0);
          for (int64_t r = 0; r < rows; ++r)
            std::copy(b.begin() + g * oc_per + j0, b.begin() + g * oc_per + j0 + nj, acc.data() + r * kColumnBlock);
          tile_product(col.data(), kk, kk, wg + j0, oc_per, acc.data(), kColumnBlock, rows, nj);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t px = p0 + r;
            float* yp = y + in * ys[0] + (g * oc_per + j0) * ys[1] + (px / ow) * ys[2] + (px % ow) * ys[3];
            const float* a = acc.data() + r * kColumnBlock;
            for (int64_t j = 0; j < nj; ++j) yp[j * ys[1]] = a[j];
          }
        }
      }
  return out;
}

// softmax(q k^T scale + mask) v per batch and head, with each row's logsumexp (what ATen's flash attention for
// the CPU returns): the output as empty_like(query), logsumexp [B, H, L] with the strides of a [B, L, H] transposed.
void attention(const ShimTensor& q, const ShimTensor& k, const ShimTensor& v, bool causal, const ShimTensor* mask,
               double scale, ShimTensor& out, ShimTensor& lse) {
  const int64_t nb = q.sizes[0], nh = q.sizes[1], nl = q.sizes[2], ne = q.sizes[3], ns = k.sizes[2];
  const int64_t ev = v.sizes[3];
  int64_t ms[4] = {0, 0, 0, 0};  // the mask's strides as [B, H, L, S], 0 where it broadcasts
  const float* mp = nullptr;
  if (mask != nullptr) {
    require_float32(*mask, "attention's mask");
    const int64_t md = mask->dim();
    if (md > 4) throw std::invalid_argument("attention's mask has more than 4 dims");
    for (int64_t d = 0; d < md; ++d) {
      const int64_t at = 4 - md + d, want = at == 0 ? nb : at == 1 ? nh : at == 2 ? nl : ns;
      if (mask->sizes[d] != 1 && mask->sizes[d] != want) throw std::invalid_argument("attention's mask does not broadcast");
      ms[at] = mask->sizes[d] == 1 ? 0 : mask->strides[d];
    }
    mp = static_cast<const float*>(mask->data());
  }
  const float* qp = static_cast<const float*>(q.data());
  const float* kp = static_cast<const float*>(k.data());
  const float* vp = static_cast<const float*>(v.data());
  float* op = static_cast<float*>(out.data());
  float* lp = static_cast<float*>(lse.data());
  const float sc = static_cast<float>(scale);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h) {
      // this head's keys and values as contiguous rows
      std::vector<float> kr(static_cast<std::size_t>(ns * ne)), vr(static_cast<std::size_t>(ns * ev));
      std::vector<float> qr(static_cast<std::size_t>(ne)), p(static_cast<std::size_t>(ns)), acc(static_cast<std::size_t>(ev));
      for (int64_t j = 0; j < ns; ++j) {
        for (int64_t e = 0; e < ne; ++e)
          kr[j * ne + e] = kp[b * k.strides[0] + h * k.strides[1] + j * k.strides[2] + e * k.strides[3]];
        for (int64_t e = 0; e < ev; ++e)
          vr[j * ev + e] = vp[b * v.strides[0] + h * v.strides[1] + j * v.strides[2] + e * v.strides[3]];
      }
      for (int64_t i = 0; i < nl; ++i) {
        for (int64_t e = 0; e < ne; ++e)
          qr[e] = qp[b * q.strides[0] + h * q.strides[1] + i * q.strides[2] + e * q.strides[3]];
        float m = -INFINITY;
        for (int64_t j = 0; j < ns; ++j) {
          float s = causal && j > i ? -INFINITY : sc * dot(qr.data(), kr.data() + j * ne, ne);
          if (mp != nullptr) s += mp[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]];
          p[j] = s;
          m = std::max(m, s);
        }
        float sum = 0;
        for (int64_t j = 0; j < ns; ++j) {
          p[j] = std::exp(p[j] - m);
          sum += p[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < ns; ++j) {
          const float w = p[j] / sum;
          const float* vj = vr.data() + j * ev;
          for (int64_t e = 0; e < ev; ++e) acc[e] += w * vj[e];
        }
        for (int64_t e = 0; e < ev; ++e)
          op[b * out.strides[0] + h * out.strides[1] + i * out.strides[2] + e * out.strides[3]] = acc[e];
        lp[b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]] = m + std::log(sum);
      }
    }
}

}  // namespace

AOTITorchError pt2rt_lite_aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, double dropout_p, int32_t is_causal,
    AtenTensorHandle* attn_mask, double* scale, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("scaled_dot_product_flash_attention_for_cpu", [&] {
    const ShimTensor& q = *as_tensor(query);
    const ShimTensor& k = *as_tensor(key);
    const ShimTensor& v = *as_tensor(value);
    for (const ShimTensor* t : {&q, &k, &v}) {
      require_float32(*t, "attention's query, key and value");
      if (t->dim() != 4) throw std::invalid_argument("attention takes [batch, heads, length, features] tensors");
    }
    if (dropout_p != 0.0) throw std::invalid_argument("attention with dropout is not inference");
    if (k.sizes[0] != q.sizes[0] || v.sizes[0] != q.sizes[0] || k.sizes[1] != q.sizes[1] || v.sizes[1] != q.sizes[1] ||
        k.sizes[3] != q.sizes[3] || v.sizes[2] != k.sizes[2])
      throw std::invalid_argument("attention's query, key and value do not agree");
    // the output as empty_like(query) (its strides where it is dense), logsumexp as [B, L, H] transposed
    std::vector<int64_t> osizes = {q.sizes[0], q.sizes[1], q.sizes[2], v.sizes[3]};
    std::vector<int64_t> ostrides = q.is_non_overlapping_and_dense() && v.sizes[3] == q.sizes[3]
                                        ? q.strides
                                        : contiguous_strides(osizes);
    auto out = empty_strided(osizes, ostrides, kFloat32);
    const int64_t nl = q.sizes[2], nh = q.sizes[1];
    auto lse = empty_strided({q.sizes[0], nh, nl}, {nl * nh, 1, nh}, kFloat32);
    const double s = scale != nullptr ? *scale : 1.0 / std::sqrt(static_cast<double>(q.sizes[3]));
    attention(q, k, v, is_causal != 0, attn_mask != nullptr && *attn_mask != nullptr ? as_tensor(*attn_mask) : nullptr,
              s, *out, *lse);
    *ret0 = as_handle(out.release());
    *ret1 = as_handle(lse.release());
  });
}

AOTITorchError pt2rt_lite_aoti_torch_cpu_addmm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat1,
                                                   AtenTensorHandle mat2, double beta, double alpha) {
  return guarded("addmm", [&] {
    addmm(*as_tensor(out), as_tensor(self), *as_tensor(mat1), *as_tensor(mat2), static_cast<float>(beta),
          static_cast<float>(alpha));
  });
}

AOTITorchError pt2rt_lite_aoti_torch_cpu_mm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2) {
  return guarded("mm", [&] { addmm(*as_tensor(out), nullptr, *as_tensor(self), *as_tensor(mat2), 0.0f, 1.0f); });
}

AOTITorchError pt2rt_lite_aoti_torch_cpu_bmm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2) {
  return guarded("bmm", [&] {
    ShimTensor& o = *as_tensor(out);
    const ShimTensor& a = *as_tensor(self);
    const ShimTensor& b = *as_tensor(mat2);
    if (o.dim() != 3 || a.dim() != 3 || b.dim() != 3 || a.sizes[0] != b.sizes[0] || o.sizes[0] != a.sizes[0])
      throw std::invalid_argument("bmm: sizes do not agree");
    for (int64_t i = 0; i < a.sizes[0]; ++i) {
      auto slice = [i](const ShimTensor& t) {
        ShimTensor s = t;
        s.offset += i * t.strides[0];
        s.sizes.erase(s.sizes.begin());
        s.strides.erase(s.strides.begin());
        return s;
      };
      ShimTensor os = slice(o);
      addmm(os, nullptr, slice(a), slice(b), 0.0f, 1.0f);
    }
  });
}

AOTITorchError pt2rt_lite_aoti_torch_cpu_convolution(AtenTensorHandle input, AtenTensorHandle weight,
                                                     AtenTensorHandle* bias, const int64_t* stride, int64_t stride_len,
                                                     const int64_t* padding, int64_t padding_len,
                                                     const int64_t* dilation, int64_t dilation_len, int32_t transposed,
                                                     const int64_t*, int64_t, int64_t groups, AtenTensorHandle* ret0) {
  return guarded("convolution", [&] {
    if (transposed) throw std::invalid_argument("transposed convolutions are not in lite");
    auto out = convolution(*as_tensor(input), *as_tensor(weight), bias != nullptr ? as_tensor(*bias) : nullptr,
                           std::vector<int64_t>(stride, stride + stride_len),
                           std::vector<int64_t>(padding, padding + padding_len),
                           std::vector<int64_t>(dilation, dilation + dilation_len), groups);
    *ret0 = as_handle(out.release());
  });
}
