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

#include <omp.h>

#include "../kernels/attention.h"
#include "guard.h"
#include "kernels.h"
#include "tensor.h"

using namespace pt2rt::lite;

namespace {

void require_float32(const ShimTensor& t, const char* what) {
  if (t.dtype != kFloat32)
    throw std::invalid_argument(std::string(what) + " has dtype code " + std::to_string(t.dtype) +
                                "; lite's kernels take float32");
}

// [2, 3, 4]
std::string shape_text(const std::vector<int64_t>& sizes) {
  std::string text = "[";
  for (size_t d = 0; d < sizes.size(); ++d) text += (d > 0 ? ", " : "") + std::to_string(sizes[d]);
  return text + "]";
}

// a pointwise.h activation name's code; an unknown one is the call's error
int32_t activation_code(const char* activation) {
  const std::string name = activation != nullptr ? activation : "";
  const int32_t act = pt2rt::kernels::pointwise_activation_code(name);
  if (act < 0)
    throw std::invalid_argument("unknown activation '" + name + "', expected " +
                                pt2rt::kernels::kPointwiseActivationNames);
  return act;
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

constexpr int64_t kParallelWork = int64_t{1} << 16;  // multiply-adds below which a product stays on one thread
constexpr int64_t kKc = 256;  // the depth of the product's blocks: a panel's slice of kKc x nr floats stays in L1
constexpr int64_t kMc = 96;   // rows of the left matrix packed at a time (a multiple of every kernel set's mr)

// A matrix's columns in panels of nr ([panel][k][nr], zeros past n), as the micro kernel reads its right operand;
// get(p, j) is element [p][j].
template <class Get>
std::vector<float> pack_panels(int64_t k, int64_t n, int nr, Get get) {
  const int64_t panels = (n + nr - 1) / nr;
  std::vector<float> out(static_cast<std::size_t>(panels * k * nr), 0.0f);
  for (int64_t pn = 0; pn < panels; ++pn) {
    const int64_t j0 = pn * nr, cols = std::min<int64_t>(nr, n - j0);
    for (int64_t p = 0; p < k; ++p) {
      float* dst = out.data() + (pn * k + p) * nr;
      for (int64_t j = 0; j < cols; ++j) dst[j] = get(p, j0 + j);
    }
  }
  return out;
}

struct Target {  // where c[i][j] goes: c + i * rs + j * cs
  float* c;
  int64_t rs, cs;
};

// A product's left matrix a [m][k] for gemm_rows, as k / seg segments of seg floats per row; either read in place
// (direct: at(row, k) points at a row's floats from k to the end of its segment) or gathered
// (gather(row, k0, kc, dst): the row's floats k0 .. k0 + kc - 1 into dst).
struct Rows {  // a strided matrix, times alpha
  const float* a;
  int64_t rs, cs, k;
  float alpha;
  bool direct() const { return cs == 1 && alpha == 1.0f; }
  int64_t seg() const { return k; }
  const float* at(int64_t row, int64_t p) const { return a + row * rs + p; }
  void gather(int64_t row, int64_t k0, int64_t kc, float* dst) const {
    for (int64_t p = 0; p < kc; ++p) dst[p] = alpha * a[row * rs + (k0 + p) * cs];
  }
};

// c = (accumulate ? c : init ? init[j] : 0) + a b, a from a Rows-like source, b in panels (pack_panels). Blocks
// of kMc rows and a share of the panels are the threads' tasks; the depth in blocks of about kKc (whole segments
// where they are shorter).
template <class Source>
void gemm_rows(int64_t m, int64_t n, int64_t k, const Source& src, const float* panels, Target c, const float* init,
               bool accumulate, bool parallel) {
  const KernelSet& ks = kernels();
  const int64_t mr = ks.mr, nr = ks.nr;
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c.c[i * c.rs + j * c.cs] = init != nullptr ? init[j] : 0.0f;
    return;
  }
  struct Block {
    int64_t k0, segments, len;
  };
  std::vector<Block> blocks;
  const bool direct = src.direct();
  const int64_t seg = direct ? src.seg() : k;
  if (seg >= kKc) {
    for (int64_t s0 = 0; s0 < k; s0 += seg)
      for (int64_t p = 0; p < seg; p += kKc) blocks.push_back({s0 + p, 1, std::min(kKc, seg - p)});
  } else {
    const int64_t per = kKc / seg, total = k / seg;
    for (int64_t t = 0; t < total; t += per) blocks.push_back({t * seg, std::min(per, total - t), seg});
  }
  int64_t most = 1;
  for (const Block& blk : blocks) most = std::max(most, blk.segments);
  const int64_t n_panels = (n + nr - 1) / nr;
  const int threads = parallel && m * n * k >= kParallelWork ? omp_get_max_threads() : 1;
  // blocks of at most kMc rows, as even as the strips allow (a thread's share is whole blocks)
  int64_t m_blocks = (m + kMc - 1) / kMc;
  if (threads > 1 && m_blocks % threads != 0 && m_blocks > threads) m_blocks += threads - m_blocks % threads;
  const int64_t block_rows = ((m + m_blocks - 1) / m_blocks + mr - 1) / mr * mr;
  m_blocks = (m + block_rows - 1) / block_rows;
  // enough tasks for the threads: the panels split when the rows are few
  int64_t chunks = 1;
  while (threads > 1 && m_blocks * chunks < 4 * threads && chunks < n_panels) chunks *= 2;
  const int64_t per_chunk = (n_panels + chunks - 1) / chunks;
  chunks = (n_panels + per_chunk - 1) / per_chunk;
#pragma omp parallel for schedule(dynamic) if (threads > 1 && m_blocks * chunks > 1)
  for (int64_t task = 0; task < m_blocks * chunks; ++task) {
    const int64_t i0 = (task / chunks) * block_rows, rows = std::min(block_rows, m - i0);
    const int64_t pn0 = (task % chunks) * per_chunk, pn1 = std::min(n_panels, pn0 + per_chunk);
    const int64_t strips = (rows + mr - 1) / mr;
    thread_local std::vector<const float*> ptrs;
    thread_local std::vector<float> gathered;
    ptrs.resize(static_cast<std::size_t>(strips * most * mr));
    if (!direct) gathered.resize(static_cast<std::size_t>(strips * mr * kKc));
    float tile[16 * 64];  // the tile where c's columns are not contiguous (mr <= 16, nr <= 64)
    for (const Block& blk : blocks) {
      for (int64_t s = 0; s < strips; ++s)
        for (int64_t r = 0; r < std::min(mr, rows - s * mr); ++r) {
          const int64_t row = i0 + s * mr + r;
          if (direct) {
            for (int64_t j = 0; j < blk.segments; ++j) ptrs[(s * most + j) * mr + r] = src.at(row, blk.k0 + j * blk.len);
          } else {
            float* dst = gathered.data() + (s * mr + r) * kKc;
            src.gather(row, blk.k0, blk.len, dst);
            ptrs[s * most * mr + r] = dst;
          }
        }
      const bool acc = accumulate || blk.k0 > 0;
      for (int64_t pn = pn0; pn < pn1; ++pn) {
        const int64_t j0 = pn * nr, cols = std::min(nr, n - j0);
        const float* b = panels + (pn * k + blk.k0) * nr;
        const float* start = blk.k0 == 0 && init != nullptr ? init + j0 : nullptr;
        for (int64_t s = 0; s < strips; ++s) {
          const int64_t r0 = i0 + s * mr, sr = std::min(mr, rows - s * mr);
          const float* const* a = ptrs.data() + s * most * mr;
          if (c.cs == 1) {
            ks.micro(blk.segments, blk.len, a, b, c.c + r0 * c.rs + j0, c.rs, sr, cols, start, acc);
            continue;
          }
          if (acc)
            for (int64_t r = 0; r < sr; ++r)
              for (int64_t j = 0; j < cols; ++j) tile[r * nr + j] = c.c[(r0 + r) * c.rs + (j0 + j) * c.cs];
          ks.micro(blk.segments, blk.len, a, b, tile, nr, sr, cols, start, acc);
          for (int64_t r = 0; r < sr; ++r)
            for (int64_t j = 0; j < cols; ++j) c.c[(r0 + r) * c.rs + (j0 + j) * c.cs] = tile[r * nr + j];
        }
      }
    }
  }
}

// c = (accumulate ? c : 0) + alpha a b over strided float32 matrices; b in panels (packed once where it is a
// constant: a linear layer's weight).
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const ShimTensor& b_tensor,
          Target c, float alpha, const float* init, bool accumulate) {
  const int nr = kernels().nr;
  const auto b_panels = packed(b_tensor, {3, nr}, [&] {
    const float* b = static_cast<const float*>(b_tensor.data());
    const int64_t b_rs = b_tensor.strides[0], b_cs = b_tensor.strides[1];
    return pack_panels(k, n, nr, [&](int64_t p, int64_t j) { return b[p * b_rs + j * b_cs]; });
  });
  gemm_rows(m, n, k, Rows{a, a_rs, a_cs, k, alpha}, b_panels->data(), c, init, accumulate, true);
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
  float* c = static_cast<float*>(out.data());
  const int64_t c_rs = out.strides[0], c_cs = out.strides[1];
  bool accumulate = false;
  std::vector<float> init;
  if (self != nullptr && beta != 0.0f) {
    require_float32(*self, "addmm's self");
    // self broadcasts from the right: [n], [1, n], [m, n], [m, 1], [1, 1] or []
    const int64_t sd = self->dim();
    const int64_t s_rs = sd == 2 && self->sizes[0] != 1 ? self->strides[0] : 0;
    const int64_t s_cs = sd >= 1 && self->sizes[sd - 1] != 1 ? self->strides[sd - 1] : 0;
    const float* s = static_cast<const float*>(self->data());
    if (s_rs == 0) {  // one row for all (a linear layer's bias): the product starts from it
      init.resize(static_cast<std::size_t>(n));
      for (int64_t j = 0; j < n; ++j) init[j] = beta * s[j * s_cs];
    } else {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * c_rs + j * c_cs] = beta * s[i * s_rs + j * s_cs];
      accumulate = true;
    }
  }
  gemm(m, n, k, static_cast<const float*>(mat1.data()), mat1.strides[0], mat1.strides[1], mat2, Target{c, c_rs, c_cs},
       alpha, init.empty() ? nullptr : init.data(), accumulate);
}

// A convolution's input as the product's left matrix: a row per output pixel (from `first`), a segment per tap of
// c_per input channels (k ordered tap, channel). Read in place where the channels are contiguous and not too few
// (the taps in the padding point at zeros), else gathered.
struct ConvRows {
  const float* x;  // the group's first channel
  const int64_t* xs;
  const int64_t* pixel;  // per row: its first tap's input row and column, and the offset of that pixel's image
  const int64_t* taps;   // per tap: its input row and column from the first tap's, and their offset
  int64_t h, w, kh, kw, c_per, dh, dw;
  const float* zeros;
  bool direct() const { return xs[1] == 1 && c_per >= 8; }
  int64_t seg() const { return c_per; }
  // the first input element of (pixel row, tap), null in the padding
  const float* tap(int64_t row, int64_t t) const {
    const int64_t* px = pixel + 3 * row;
    const int64_t* tp = taps + 3 * t;
    const int64_t iy = px[0] + tp[0], ix = px[1] + tp[1];
    if (iy < 0 || iy >= h || ix < 0 || ix >= w) return nullptr;
    return x + px[2] + iy * xs[2] + ix * xs[3];
  }
  const float* at(int64_t row, int64_t p) const {
    const float* t = tap(row, p / c_per);
    return t != nullptr ? t + p % c_per : zeros;
  }
  void gather(int64_t row, int64_t k0, int64_t kc, float* dst) const {
    const int64_t* px = pixel + 3 * row;
    if (k0 == 0 && kc == kh * kw * c_per) {  // the whole row: a kernel row at a time
      for (int64_t ky = 0; ky < kh; ++ky) {
        float* out = dst + ky * kw * c_per;
        const int64_t iy = px[0] + ky * dh;
        if (iy < 0 || iy >= h) {
          std::fill(out, out + kw * c_per, 0.0f);
          continue;
        }
        // the taps inside: kx in [lo, hi)
        const int64_t ix0 = px[1];
        const int64_t lo = std::min(kw, ix0 >= 0 ? int64_t{0} : (-ix0 + dw - 1) / dw);
        const int64_t hi = std::max(lo, ix0 > w - 1 ? int64_t{0} : std::min(kw, (w - 1 - ix0) / dw + 1));
        std::fill(out, out + lo * c_per, 0.0f);
        std::fill(out + hi * c_per, out + kw * c_per, 0.0f);
        const float* src = x + px[2] + iy * xs[2] + (ix0 + lo * dw) * xs[3];
        if (xs[1] == 1 && dw * xs[3] == c_per) {  // the kernel row's channels follow each other in memory
          std::copy(src, src + (hi - lo) * c_per, out + lo * c_per);
          continue;
        }
        for (int64_t kx = lo; kx < hi; ++kx)
          for (int64_t ic = 0; ic < c_per; ++ic) out[kx * c_per + ic] = src[(kx - lo) * dw * xs[3] + ic * xs[1]];
      }
      return;
    }
    for (int64_t p = k0; p < k0 + kc;) {
      const int64_t t = p / c_per, ic0 = p - t * c_per, n = std::min(c_per - ic0, k0 + kc - p);
      const float* src = tap(row, t);
      float* out = dst + (p - k0);
      if (src == nullptr)
        std::fill(out, out + n, 0.0f);
      else
        for (int64_t q = 0; q < n; ++q) out[q] = src[(ic0 + q) * xs[1]];
      p += n;
    }
  }
};

// activation (a PointwiseActivation code, after the sum): depthwise convolutions of channels-last images only
std::unique_ptr<ShimTensor> convolution(const ShimTensor& input, const ShimTensor& weight, const ShimTensor* bias,
                                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                    const std::vector<int64_t>& dilation, int64_t groups,
                                    int32_t activation = pt2rt::kernels::kPointwiseNone) {
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
    if (xs[1] == 1 && ys[1] == 1) {  // channels contiguous in and out: the kernel set's rows
      const DepthwiseRowKernel row = kernels().depthwise_row;
#pragma omp parallel for collapse(2) schedule(static) if (n * oh * ow * c * taps >= kParallelWork)
      for (int64_t in = 0; in < n; ++in)
        for (int64_t oy = 0; oy < oh; ++oy) {
          const DepthwiseRow args{x + in * xs[0], xs[2], xs[3], h, w, wk.data(), b.data(), c, kh, kw, sh, sw, ph, pw,
                                  dh, dw, y + in * ys[0] + oy * ys[2], ys[3], ow, activation};
          row(args, oy);
        }
      return out;
    }
    if (activation != pt2rt::kernels::kPointwiseNone)
      throw std::invalid_argument("convolution: an activation needs channels-last images");
#pragma omp parallel for collapse(2) schedule(static) if (n * oh * ow * c * taps >= kParallelWork)
    for (int64_t in = 0; in < n; ++in)
      for (int64_t oy = 0; oy < oh; ++oy) {
        thread_local std::vector<float> acc;
        acc.resize(static_cast<std::size_t>(c));
        for (int64_t ox = 0; ox < ow; ++ox) {
          std::copy(b.begin(), b.end(), acc.begin());
          for (int64_t ky = 0; ky < kh; ++ky) {
            const int64_t iy = oy * sh - ph + ky * dh;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t ix = ox * sw - pw + kx * dw;
              const float* wv = wk.data() + (ky * kw + kx) * c;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const float* xp = x + in * xs[0] + iy * xs[2] + ix * xs[3];
              for (int64_t ch = 0; ch < c; ++ch) acc[ch] += xp[ch * xs[1]] * wv[ch];
            }
          }
          float* yp = y + in * ys[0] + oy * ys[2] + ox * ys[3];
          for (int64_t ch = 0; ch < c; ++ch) yp[ch * ys[1]] = acc[ch];
        }
      }
    return out;
  }
  // otherwise a product per group: output pixels x (taps x input channels) times (taps x input channels) x output
  // channels; the input gathered into the product's strips as it goes (no im2col copy of the whole input), the
  // weights packed once as each group's panels
  const int64_t kk = kh * kw * c_per, pixels = oh * ow;
  const int nr = kernels().nr;
  const int64_t group_floats = (oc_per + nr - 1) / nr * kk * nr;
  const auto wp_packed = packed(weight, {2, groups, kh, kw, nr}, [&] {
    std::vector<float> wp(static_cast<std::size_t>(groups * group_floats));
    for (int64_t g = 0; g < groups; ++g) {
      const auto panels = pack_panels(kk, oc_per, nr, [&](int64_t p, int64_t j) {
        const int64_t tap = p / c_per, ic = p % c_per;
        return wt[(g * oc_per + j) * s4(weight, 0) + ic * s4(weight, 1) + (tap / kw) * s4(weight, 2) +
                  (tap % kw) * s4(weight, 3)];
      });
      std::copy(panels.begin(), panels.end(), wp.begin() + g * group_floats);
    }
    return wp;
  });
  // rows are pixels: one product over all images where the output's pixels are evenly spaced, else one per image
  const bool even = ys[2] == ow * ys[3] && (n == 1 || ys[0] == pixels * ys[3]);
  const int64_t images = even ? 1 : n, rows_per = even ? n * pixels : pixels;
  const std::vector<float> zeros(static_cast<std::size_t>(c_per), 0.0f);  // a tap in the padding
  std::vector<int64_t> pixel(static_cast<std::size_t>(3 * n * pixels)), taps(static_cast<std::size_t>(3 * kh * kw));
  for (int64_t px = 0; px < n * pixels; ++px) {
    const int64_t oy = (px % pixels) / ow, ox = px % ow;
    pixel[3 * px] = oy * sh - ph;
    pixel[3 * px + 1] = ox * sw - pw;
    pixel[3 * px + 2] = (px / pixels) * xs[0];
  }
  for (int64_t t = 0; t < kh * kw; ++t) {
    taps[3 * t] = (t / kw) * dh;
    taps[3 * t + 1] = (t % kw) * dw;
  }
  for (int64_t image = 0; image < images; ++image)
    for (int64_t g = 0; g < groups; ++g) {
      const ConvRows src{x + g * c_per * xs[1], xs, pixel.data() + 3 * image * pixels, taps.data(), h, w, kh, kw, c_per, dh,
                         dw, zeros.data()};
      const Target target{y + image * ys[0] + g * oc_per * ys[1], ys[3], ys[1]};
      gemm_rows(rows_per, oc_per, kk, src, wp_packed->data() + g * group_floats, target, b.data() + g * oc_per, false,
                true);
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
  const KernelSet& ks = kernels();
  const int64_t heads = nb * nh;
  const bool threaded = heads * nl * ns * (ne + ev) >= kParallelWork;
  // each head's k^T and v as the products' panels, then blocks of query rows of every head as the threads' tasks
  const int64_t kt_floats = (ns + ks.nr - 1) / ks.nr * ne * ks.nr, v_floats = (ev + ks.nr - 1) / ks.nr * ns * ks.nr;
  std::vector<float> panels(static_cast<std::size_t>(heads * (kt_floats + v_floats)));
#pragma omp parallel for schedule(static) if (threaded && heads > 1)
  for (int64_t bh = 0; bh < heads; ++bh) {
    const int64_t b = bh / nh, h = bh % nh;
    const float* kh = kp + b * k.strides[0] + h * k.strides[1];
    const float* vh = vp + b * v.strides[0] + h * v.strides[1];
    const auto kt = pack_panels(ne, ns, ks.nr, [&](int64_t e, int64_t j) { return kh[j * k.strides[2] + e * k.strides[3]]; });
    const auto vr = pack_panels(ns, ev, ks.nr, [&](int64_t j, int64_t e) { return vh[j * v.strides[2] + e * v.strides[3]]; });
    std::copy(kt.begin(), kt.end(), panels.begin() + bh * (kt_floats + v_floats));
    std::copy(vr.begin(), vr.end(), panels.begin() + bh * (kt_floats + v_floats) + kt_floats);
  }
  constexpr int64_t kQueryRows = 32;
  const int64_t row_blocks = (nl + kQueryRows - 1) / kQueryRows;
#pragma omp parallel for schedule(dynamic) if (threaded && heads * row_blocks > 1)
  for (int64_t task = 0; task < heads * row_blocks; ++task) {
    const int64_t bh = task / row_blocks, b = bh / nh, h = bh % nh;
    const int64_t i0 = (task % row_blocks) * kQueryRows, rows = std::min(kQueryRows, nl - i0);
    const float* kt = panels.data() + bh * (kt_floats + v_floats);
    const float* vr = kt + kt_floats;
    thread_local std::vector<float> scores, mask_row;
    scores.resize(static_cast<std::size_t>(rows * ns));
    mask_row.resize(static_cast<std::size_t>(ns));
    gemm_rows(rows, ns, ne, Rows{qp + b * q.strides[0] + h * q.strides[1] + i0 * q.strides[2], q.strides[2],
                                 q.strides[3], ne, 1.0f},
              kt, Target{scores.data(), ns, 1}, nullptr, false, false);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const float* mrow = nullptr;
      if (mp != nullptr) {
        const float* m0 = mp + b * ms[0] + h * ms[1] + i * ms[2];
        if (ms[3] == 1) {
          mrow = m0;
        } else {
          for (int64_t j = 0; j < ns; ++j) mask_row[j] = m0[j * ms[3]];
          mrow = mask_row.data();
        }
      }
      lp[b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]] =
          ks.softmax_row(scores.data() + r * ns, ns, causal ? std::min(ns, i + 1) : ns, sc, mrow);
    }
    gemm_rows(rows, ev, ns, Rows{scores.data(), ns, 1, ns, 1.0f}, vr,
              Target{op + b * out.strides[0] + h * out.strides[1] + i0 * out.strides[2], out.strides[2],
                     out.strides[3]},
              nullptr, false, false);
  }
}

}  // namespace

namespace {

// q [B, H, L_q, D], k [B, H, L_k, D] and v [B, H, L_k, D_v], float32: both attention shims' arguments
void check_heads(const ShimTensor& q, const ShimTensor& k, const ShimTensor& v) {
  for (const ShimTensor* t : {&q, &k, &v}) {
    require_float32(*t, "attention's query, key and value");
    if (t->dim() != 4) throw std::invalid_argument("attention takes [batch, heads, length, features] tensors");
  }
  if (k.sizes[0] != q.sizes[0] || v.sizes[0] != q.sizes[0] || k.sizes[1] != q.sizes[1] || v.sizes[1] != q.sizes[1] ||
      k.sizes[3] != q.sizes[3] || v.sizes[2] != k.sizes[2])
    throw std::invalid_argument("attention's query, key and value do not agree (expected k [B, H, L_k, D] and v "
                                "[B, H, L_k, D_v] for q [B, H, L_q, D])");
}

}  // namespace

AOTITorchError pt2rt_lite_aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, double dropout_p, int32_t is_causal,
    AtenTensorHandle* attn_mask, double* scale, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded("scaled_dot_product_flash_attention_for_cpu", [&] {
    const ShimTensor& q = *as_tensor(query);
    const ShimTensor& k = *as_tensor(key);
    const ShimTensor& v = *as_tensor(value);
    check_heads(q, k, v);
    if (dropout_p != 0.0) throw std::invalid_argument("attention with dropout is not inference");
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

namespace {

std::unique_ptr<ShimTensor> depthwise(AtenTensorHandle x, AtenTensorHandle weight, AtenTensorHandle* bias,
                                      const int64_t* stride, int64_t stride_len, const int64_t* padding,
                                      int64_t padding_len, const int64_t* dilation, int64_t dilation_len,
                                      int32_t activation) {
  const ShimTensor& in = *as_tensor(x);
  const ShimTensor& wk = *as_tensor(weight);  // [kh, kw, C]
  if (in.dim() != 4 || wk.dim() != 3 || wk.sizes[2] != in.sizes[1])
    throw std::invalid_argument("expected x [N, C, H, W] and weight [kh, kw, C] of its channels");
  // the weight as convolution() reads it, [C, 1, kh, kw], a view of the same memory
  ShimTensor w = wk;
  w.sizes = {wk.sizes[2], 1, wk.sizes[0], wk.sizes[1]};
  w.strides = {wk.strides[2], wk.sizes[2], wk.strides[0], wk.strides[1]};
  // channels-last out, as libpt2rt_kernels' op returns (its input made channels-last first where it is not, or
  // where its channels are not next to each other: a view of every other channel)
  std::unique_ptr<ShimTensor> cl;
  if (!is_channels_last_2d(in) || in.strides[1] != 1) {
    const int64_t c = in.sizes[1], h = in.sizes[2], wd = in.sizes[3];
    cl = empty_strided(in.sizes, {h * wd * c, 1, wd * c, c}, kFloat32);
    copy_strided(*cl, in);
  }
  return convolution(cl ? *cl : in, w, bias != nullptr ? as_tensor(*bias) : nullptr,
                     std::vector<int64_t>(stride, stride + stride_len),
                     std::vector<int64_t>(padding, padding + padding_len),
                     std::vector<int64_t>(dilation, dilation + dilation_len), in.sizes[1], activation);
}

}  // namespace

AOTITorchError pt2rt_lite_aoti_torch_cpu_depthwise_conv2d(AtenTensorHandle x, AtenTensorHandle weight,
                                                          AtenTensorHandle* bias, const int64_t* stride,
                                                          int64_t stride_len, const int64_t* padding,
                                                          int64_t padding_len, const int64_t* dilation,
                                                          int64_t dilation_len, AtenTensorHandle* ret0) {
  return guarded("pt2rt::depthwise_conv2d", [&] {
    *ret0 = as_handle(depthwise(x, weight, bias, stride, stride_len, padding, padding_len, dilation, dilation_len,
                                pt2rt::kernels::kPointwiseNone)
                          .release());
  });
}

AOTITorchError pt2rt_lite_aoti_torch_cpu_depthwise_conv2d_act(AtenTensorHandle x, AtenTensorHandle weight,
                                                              AtenTensorHandle* bias, const int64_t* stride,
                                                              int64_t stride_len, const int64_t* padding,
                                                              int64_t padding_len, const int64_t* dilation,
                                                              int64_t dilation_len, const char* activation,
                                                              AtenTensorHandle* ret0) {
  return guarded("pt2rt::depthwise_conv2d_act", [&] {
    const int32_t act = activation_code(activation);
    *ret0 = as_handle(
        depthwise(x, weight, bias, stride, stride_len, padding, padding_len, dilation, dilation_len, act).release());
  });
}

namespace {

// in [N, C, H, W] as the pointwise and Winograd kernels read it, its pixels' channels one after another with nothing
// between: in itself where it is so (a dim of size 1 may have any stride), else a copy made in `copy` (a view of some
// of an image's channels is not: the kernels would read the others)
const ShimTensor& dense_channels_last(const ShimTensor& in, std::unique_ptr<ShimTensor>& copy) {
  const int64_t c = in.sizes[1], h = in.sizes[2], w = in.sizes[3];
  const std::vector<int64_t> dense{h * w * c, 1, w * c, c};
  for (int d = 0; d < 4; ++d) {
    if (in.sizes[d] > 1 && in.strides[d] != dense[d]) {
      copy = empty_strided(in.sizes, dense, kFloat32);
      copy_strided(*copy, in);
      return *copy;
    }
  }
  return in;
}

// a bias [n] of any stride as n contiguous floats (none for none)
std::vector<float> bias_values(const ShimTensor* b, int64_t n) {
  std::vector<float> values;
  if (b != nullptr) {
    const float* p = static_cast<const float*>(b->data());
    for (int64_t j = 0; j < n; ++j) values.push_back(p[j * b->strides[0]]);
  }
  return values;
}

}  // namespace

AOTITorchError pt2rt_lite_aoti_torch_cpu_pointwise_conv2d(AtenTensorHandle x, AtenTensorHandle weight,
                                                          AtenTensorHandle* bias, int64_t out_channels,
                                                          const char* activation, AtenTensorHandle* ret0) {
  return guarded("pt2rt::pointwise_conv2d", [&] {
    using pt2rt::kernels::kPointwiseColumnAlign;
    const ShimTensor& in = *as_tensor(x);
    const ShimTensor& wk = *as_tensor(weight);  // [C_in, C_out padded]
    const ShimTensor* b = bias != nullptr ? as_tensor(*bias) : nullptr;
    const int32_t act = activation_code(activation);
    require_float32(in, "x");
    require_float32(wk, "weight");
    if (b != nullptr) require_float32(*b, "bias");
    if (in.dim() != 4 || wk.dim() != 2 || wk.sizes[0] != in.sizes[1] || out_channels <= 0 ||
        wk.sizes[1] < out_channels || wk.sizes[1] % kPointwiseColumnAlign != 0 || wk.strides[1] != 1 ||
        wk.strides[0] != wk.sizes[1] || (b != nullptr && (b->dim() != 1 || b->sizes[0] != out_channels)))
      throw std::invalid_argument("expected x [N, C_in, H, W], a dense weight [C_in, C_out padded to a multiple of " +
                                  std::to_string(kPointwiseColumnAlign) + "] and bias [C_out] for " +
                                  std::to_string(out_channels) + " channels out");
    const int64_t n = in.sizes[0], c = in.sizes[1], h = in.sizes[2], wd = in.sizes[3];
    std::unique_ptr<ShimTensor> copy;
    const ShimTensor& x_in = dense_channels_last(in, copy);
    const std::vector<float> bv = bias_values(b, out_channels);
    auto out = empty_strided({n, out_channels, h, wd}, {h * wd * out_channels, 1, wd * out_channels, out_channels},
                             kFloat32);
    const int64_t rows = n * h * wd;
    const PointwiseRows whole{static_cast<const float*>(x_in.data()), c, c,
                              static_cast<const float*>(wk.data()), wk.sizes[1], b != nullptr ? bv.data() : nullptr,
                              static_cast<float*>(out->data()), out_channels, rows, out_channels, act};
    const PointwiseKernel kernel = kernels().pointwise;
    // one piece of pixels per thread, a multiple of 24 (of every tile's rows), each computed whole by one thread
    const int64_t threads = rows * c * out_channels >= kParallelWork ? omp_get_max_threads() : 1;
    const int64_t piece = ((rows + threads - 1) / threads + 23) / 24 * 24;
    const int64_t pieces = (rows + piece - 1) / piece;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t p = 0; p < pieces; ++p) {
      PointwiseRows part = whole;
      part.in += p * piece * c;
      part.out += p * piece * out_channels;
      part.rows = std::min(piece, rows - p * piece);
      kernel(part);
    }
    *ret0 = as_handle(out.release());
  });
}

namespace {

// The linear kernel of the instruction set lite's other kernels run (libpt2rt_kernels' build of it, linked in: the
// lite kernel set would hold a second copy)
pt2rt::kernels::LinearKernel linear_fn() {
  static const pt2rt::kernels::LinearKernel fn = [] {
    const std::string set = kernels().name;
#if defined(__x86_64__)  // the AVX files are x86-64's alone (CMakeLists.txt)
    if (set == "avx512" && pt2rt::kernels::linear_avx512()) return pt2rt::kernels::linear_avx512();
    if ((set == "avx512" || set == "avx2") && pt2rt::kernels::linear_avx2()) return pt2rt::kernels::linear_avx2();
#endif
    return pt2rt::kernels::linear_baseline();
  }();
  return fn;
}

}  // namespace

AOTITorchError pt2rt_lite_aoti_torch_cpu_linear(AtenTensorHandle x, AtenTensorHandle weight, AtenTensorHandle* bias,
                                                int64_t out_features, const char* activation, AtenTensorHandle* ret0) {
  return guarded("pt2rt::linear", [&] {
    using pt2rt::kernels::kLinearPanel;
    const ShimTensor& in = *as_tensor(x);
    const ShimTensor& wk = *as_tensor(weight);  // [panels, in, 16]
    const ShimTensor* b = bias != nullptr ? as_tensor(*bias) : nullptr;
    const int32_t act = activation_code(activation);
    require_float32(in, "x");
    require_float32(wk, "weight");
    if (b != nullptr) require_float32(*b, "bias");
    const int64_t k = in.dim() >= 1 ? in.sizes.back() : -1, panels = (out_features + kLinearPanel - 1) / kLinearPanel;
    // dense: each dim of more than one entry where the layout puts it
    if (in.dim() < 1 || out_features <= 0 || wk.dim() != 3 || wk.sizes[0] != panels || wk.sizes[1] != k ||
        wk.sizes[2] != kLinearPanel || wk.strides[2] != 1 || (k > 1 && wk.strides[1] != kLinearPanel) ||
        (panels > 1 && k > 0 && wk.strides[0] != k * kLinearPanel) ||
        (b != nullptr && (b->dim() != 1 || b->sizes[0] != out_features)))
      throw std::invalid_argument("x has " + std::to_string(k) + " features and " + std::to_string(out_features) +
                                  " come out; expected a dense weight [" + std::to_string(panels) + ", " +
                                  std::to_string(k) + ", " + std::to_string(kLinearPanel) + "] and bias [" +
                                  std::to_string(out_features) + "], got " + shape_text(wk.sizes) + " and " +
                                  (b != nullptr ? shape_text(b->sizes) : std::string("none")));
    // rows k floats apart (x as torch lays it out), or a 2-d x's rows anywhere, each contiguous; else a copy
    std::unique_ptr<ShimTensor> copy;
    const ShimTensor* rows_of = &in;
    const bool strided_rows = in.dim() == 2 && (k <= 1 || in.strides[1] == 1) && in.strides[0] >= k;
    if (!strided_rows && !in.is_contiguous()) {
      copy = empty_strided(in.sizes, contiguous_strides(in.sizes), kFloat32);
      copy_strided(*copy, in);
      rows_of = copy.get();
    }
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < in.sizes.size(); ++d) rows *= in.sizes[d];
    const int64_t in_rs = strided_rows && rows > 1 ? in.strides[0] : k;
    std::vector<int64_t> sizes = in.sizes;
    sizes.back() = out_features;
    auto out = empty_strided(sizes, contiguous_strides(sizes), kFloat32);
    if (rows > 0) {
      const std::vector<float> bv = bias_values(b, out_features);
      const pt2rt::kernels::LinearRows whole{static_cast<const float*>(rows_of->data()), in_rs, k,
                             static_cast<const float*>(wk.data()), b != nullptr ? bv.data() : nullptr,
                             static_cast<float*>(out->data()), out_features, rows, out_features, act};
      const pt2rt::kernels::LinearKernel kernel = linear_fn();
      const int64_t threads = rows * k * out_features >= 2 * kParallelWork ? omp_get_max_threads() : 1;
      const pt2rt::kernels::LinearPieces cut = pt2rt::kernels::linear_pieces(whole, threads);  // as the torch op
#pragma omp parallel for schedule(static) if (cut.pieces > 1)
      for (int64_t p = 0; p < cut.pieces; ++p) kernel(pt2rt::kernels::linear_piece(whole, cut, p));
    }
    *ret0 = as_handle(out.release());
  });
}

AOTITorchError pt2rt_lite_aoti_torch_cpu_winograd_conv2d(AtenTensorHandle x, AtenTensorHandle weight,
                                                         AtenTensorHandle taps, AtenTensorHandle* bias,
                                                         int64_t out_channels, const int64_t* padding,
                                                         int64_t padding_len, const char* activation,
                                                         AtenTensorHandle* ret0) {
  return guarded("pt2rt::winograd_conv2d", [&] {
    using pt2rt::kernels::kPointwiseColumnAlign;
    const ShimTensor& in = *as_tensor(x);
    const ShimTensor& wk = *as_tensor(weight);  // [16, C_in, C_out padded]
    const ShimTensor& tk = *as_tensor(taps);    // [3, 3, C_in, C_out padded]
    const ShimTensor* b = bias != nullptr ? as_tensor(*bias) : nullptr;
    const int32_t act = activation_code(activation);
    require_float32(in, "x");
    require_float32(wk, "weight");
    require_float32(tk, "taps");
    if (b != nullptr) require_float32(*b, "bias");
    if (padding_len != 2 || padding[0] < 0 || padding[1] < 0)
      throw std::invalid_argument("expected padding of two sizes >= 0");
    if (in.dim() != 4) throw std::invalid_argument("expected x [N, C_in, H, W]");
    const int64_t n = in.sizes[0], c = in.sizes[1], h = in.sizes[2], wd = in.sizes[3];
    const int64_t oh = h + 2 * padding[0] - 2, ow = wd + 2 * padding[1] - 2;
    if (oh <= 0 || ow <= 0)
      throw std::invalid_argument("a " + std::to_string(h) + "x" + std::to_string(wd) +
                                  " image with its padding is smaller than the 3x3 kernel");
    const int64_t ldw = wk.dim() == 3 ? wk.sizes[2] : -1;
    if (wk.dim() != 3 || wk.sizes[0] != 16 || wk.sizes[1] != c || out_channels <= 0 || ldw < out_channels ||
        ldw % kPointwiseColumnAlign != 0 || wk.strides[2] != 1 || wk.strides[1] != ldw || wk.strides[0] != c * ldw ||
        tk.dim() != 4 || tk.sizes != std::vector<int64_t>{3, 3, c, ldw} ||
        tk.strides != std::vector<int64_t>{3 * c * ldw, c * ldw, ldw, 1} ||
        (b != nullptr && (b->dim() != 1 || b->sizes[0] != out_channels)))
      throw std::invalid_argument("expected a dense weight [16, C_in, L], taps [3, 3, C_in, L] (L a multiple of " +
                                  std::to_string(kPointwiseColumnAlign) + " >= C_out) and bias [C_out] for " +
                                  std::to_string(c) + " channels in and " + std::to_string(out_channels) + " out");
    std::unique_ptr<ShimTensor> copy;
    const ShimTensor& x_in = dense_channels_last(in, copy);
    const std::vector<float> bv = bias_values(b, out_channels);
    auto out = empty_strided({n, out_channels, oh, ow}, {oh * ow * out_channels, 1, ow * out_channels, out_channels},
                             kFloat32);
    const WinogradConv conv{static_cast<const float*>(x_in.data()), n, h, wd, c,
                            static_cast<const float*>(wk.data()), static_cast<const float*>(tk.data()), ldw,
                            b != nullptr ? bv.data() : nullptr, static_cast<float*>(out->data()), oh, ow,
                            out_channels, padding[0], padding[1], act};
    const int64_t tiles = pt2rt::kernels::winograd_tile_count(conv);
    const int64_t threads = tiles * 16 * c * out_channels >= kParallelWork ? omp_get_max_threads() : 1;
    const int64_t per_call = pt2rt::kernels::winograd_tiles_per_call(tiles, threads);
    const int64_t calls = (tiles + per_call - 1) / per_call;
    const WinogradTilesKernel kernel = kernels().winograd;
    // each output the same in any call, at any thread count; the scratch allocated here, where a failure is an error
    // of the call (inside the parallel region it would end the process)
    const int64_t team = calls > 1 ? std::min<int64_t>(threads, calls) : 1;
    const auto per_thread = static_cast<size_t>(pt2rt::kernels::winograd_scratch_floats(conv, per_call));
    std::vector<float> scratch(per_thread * static_cast<size_t>(team));
#pragma omp parallel num_threads(static_cast<int>(team)) if (team > 1)
    {
      float* mine = scratch.data() + per_thread * static_cast<size_t>(omp_get_thread_num());
#pragma omp for schedule(static)
      for (int64_t i = 0; i < calls; ++i) kernel(conv, i * per_call, std::min(tiles, (i + 1) * per_call), mine);
    }
    *ret0 = as_handle(out.release());
  });
}

namespace {

// The attention kernel of the instruction set lite's other kernels run (kernels.h: cpuid, narrowed by
// PT2RT_LITE_KERNELS)
pt2rt::kernels::AttentionKernel attention_fn() {
  static const pt2rt::kernels::AttentionKernel fn = [] {
    const std::string set = kernels().name;
#if defined(__x86_64__)  // the AVX files are x86-64's alone (CMakeLists.txt)
    if (set == "avx512" && pt2rt::kernels::attention_avx512()) return pt2rt::kernels::attention_avx512();
    if ((set == "avx512" || set == "avx2") && pt2rt::kernels::attention_avx2()) return pt2rt::kernels::attention_avx2();
#endif
    return pt2rt::kernels::attention_baseline();
  }();
  return fn;
}

// t itself where each of its rows (the last dim) is contiguous, else a contiguous copy made in `copy`
const ShimTensor& dense_rows(const ShimTensor& t, std::unique_ptr<ShimTensor>& copy) {
  if (t.sizes[3] <= 1 || t.strides[3] == 1) return t;
  copy = empty_strided(t.sizes, contiguous_strides(t.sizes), kFloat32);
  copy_strided(*copy, t);
  return *copy;
}

}  // namespace

AOTITorchError pt2rt_lite_aoti_torch_cpu_attention(AtenTensorHandle q, AtenTensorHandle k, AtenTensorHandle v,
                                                   double scale, AtenTensorHandle* ret0) {
  return guarded("pt2rt::attention", [&] {
    const ShimTensor& qt = *as_tensor(q);
    const ShimTensor& kt = *as_tensor(k);
    const ShimTensor& vt = *as_tensor(v);
    check_heads(qt, kt, vt);
    const int64_t nb = qt.sizes[0], nh = qt.sizes[1], lq = qt.sizes[2], d = qt.sizes[3];
    const int64_t lk = kt.sizes[2], dv = vt.sizes[3];
    std::unique_ptr<ShimTensor> qc, kc, vc;
    const ShimTensor& qd = dense_rows(qt, qc);
    const ShimTensor& kd = dense_rows(kt, kc);
    const ShimTensor& vd = dense_rows(vt, vc);
    // [B, L_q, H, D_v] in memory, as libpt2rt_kernels' op returns it (its strides as torch's for empty dims)
    const int64_t row = std::max<int64_t>(dv, 1) * std::max<int64_t>(nh, 1);
    auto out = empty_strided({nb, nh, lq, dv}, {std::max<int64_t>(lq, 1) * row, std::max<int64_t>(dv, 1), row, 1},
                             kFloat32);
    const int64_t heads = nb * nh;
    if (heads * lq * dv > 0) {
      const auto* qp = static_cast<const float*>(qd.data());
      const auto* kp = static_cast<const float*>(kd.data());
      const auto* vp = static_cast<const float*>(vd.data());
      auto* op = static_cast<float*>(out->data());
      // pieces of whole row blocks, every row computed as at one thread (as libpt2rt_kernels' op cuts them)
      const int64_t per_row = std::max<int64_t>(1, lk * (d + dv)), block = pt2rt::kernels::kAttentionRowBlock;
      const int64_t rows = std::max<int64_t>(1, ((int64_t{1} << 17) / per_row + block - 1) / block) * block;
      const int64_t per_head = (lq + rows - 1) / rows, pieces = heads * per_head;
      const int64_t threads = heads * lq * per_row >= kParallelWork ? omp_get_max_threads() : 1;
      const int64_t team = std::max<int64_t>(1, std::min(threads, pieces));
      const auto per_thread = static_cast<size_t>(pt2rt::kernels::attention_scratch_floats(lk, d));
      std::vector<float> scratch(per_thread * static_cast<size_t>(team));  // here: a failure is the call's error
      const pt2rt::kernels::AttentionKernel kernel = attention_fn();
      const float sc = static_cast<float>(scale);
#pragma omp parallel num_threads(static_cast<int>(team)) if (team > 1)
      {
        float* mine = scratch.data() + per_thread * static_cast<size_t>(omp_get_thread_num());
        int64_t packed = -1;  // the head whose k^T `mine` holds
#pragma omp for schedule(static)
        for (int64_t p = 0; p < pieces; ++p) {
          const int64_t i = p / per_head, b = i / nh, h = i % nh, r0 = p % per_head * rows;
          const pt2rt::kernels::AttentionHead head{
              qp + b * qd.strides[0] + h * qd.strides[1], kp + b * kd.strides[0] + h * kd.strides[1],
              vp + b * vd.strides[0] + h * vd.strides[1], op + b * lq * nh * dv + h * dv, qd.strides[2],
              kd.strides[2], vd.strides[2], nh * dv, lq, lk, d, dv, sc};
          kernel(head, r0, std::min(lq, r0 + rows), mine, packed == i);
          packed = i;
        }
      }
    }
    *ret0 = as_handle(out.release());
  });
}
