// Included after pointwise_impl.h (its vector prelude, the pointwise kernel and the activations): the Winograd
// F(2x2, 3x3) convolution of winograd.h for the ISA that file is compiled for.
#pragma once

#include <cstdint>
#include <cstring>

#include "pointwise.h"
#include "winograd.h"

namespace {

// n floats from p as a vector (n >= L: a whole one), zeros past them
inline vf wg_load(const float* p, int64_t n) {
  if (n >= L) return loadv(p);
  float part[L] = {};
  std::memcpy(part, p, static_cast<std::size_t>(n) * sizeof(float));
  return loadv(part);
}

inline void wg_store(float* p, vf v, int64_t n) {
  if (n >= L) storev(p, v);
  else pw_store_part(p, v, n);
}

struct WgTile {
  int64_t image, y0, x0;  // the first output's row and column
};

inline WgTile wg_tile(const pt2rt::kernels::WinogradConv& a, int64_t t) {
  const int64_t tw = pt2rt::kernels::winograd_tiles_w(a), per_image = pt2rt::kernels::winograd_tiles_h(a) * tw;
  const int64_t r = t % per_image;
  return WgTile{t / per_image, r / tw * 2, r % tw * 2};
}

// B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]: element (i, j) to v[i * 4 + j]
inline void wg_input_transform(const vf (&d)[4][4], vf (&v)[16]) {
  vf t[4][4];
  for (int j = 0; j < 4; ++j) {
    t[0][j] = d[0][j] - d[2][j];
    t[1][j] = d[1][j] + d[2][j];
    t[2][j] = d[2][j] - d[1][j];
    t[3][j] = d[1][j] - d[3][j];
  }
  for (int i = 0; i < 4; ++i) {
    v[i * 4 + 0] = t[i][0] - t[i][2];
    v[i * 4 + 1] = t[i][1] + t[i][2];
    v[i * 4 + 2] = t[i][2] - t[i][1];
    v[i * 4 + 3] = t[i][1] - t[i][3];
  }
}

// A^T m A, A^T = [1 1 1 0; 0 1 -1 -1]
inline void wg_output_transform(const vf (&m)[16], vf (&y)[2][2]) {
  vf s[4][2];
  for (int i = 0; i < 4; ++i) {
    s[i][0] = m[i * 4 + 0] + m[i * 4 + 1] + m[i * 4 + 2];
    s[i][1] = m[i * 4 + 1] - m[i * 4 + 2] - m[i * 4 + 3];
  }
  for (int l = 0; l < 2; ++l) {
    y[0][l] = s[0][l] + s[1][l] + s[2][l];
    y[1][l] = s[1][l] - s[2][l] - s[3][l];
  }
}

// a tile's outputs directly from the taps: each a sum over the taps inside the image, as eager's convolution skips
// the padding, so inf and NaN reach the outputs they reach there
void wg_direct_tile(const pt2rt::kernels::WinogradConv& a, const WgTile& tile, const PwActivation& act) {
  const float* image = a.in + tile.image * a.h * a.w * a.c;
  float* out = a.out + tile.image * a.oh * a.ow * a.oc;
  for (int64_t oy = tile.y0; oy < tile.y0 + 2 && oy < a.oh; ++oy) {
    for (int64_t ox = tile.x0; ox < tile.x0 + 2 && ox < a.ow; ++ox) {
      for (int64_t j0 = 0; j0 < a.oc; j0 += L) {
        vf acc[1][1] = {{a.bias != nullptr ? wg_load(a.bias + j0, a.oc - j0) : splat(0.0f)}};
        for (int64_t ky = 0; ky < 3; ++ky) {
          const int64_t iy = oy - a.pad_h + ky;
          if (iy < 0 || iy >= a.h) continue;
          for (int64_t kx = 0; kx < 3; ++kx) {
            const int64_t ix = ox - a.pad_w + kx;
            if (ix < 0 || ix >= a.w) continue;
            const float* x = image + (iy * a.w + ix) * a.c;
            const float* tap = a.taps + (ky * 3 + kx) * a.c * a.ldw + j0;
            for (int64_t i = 0; i < a.c; ++i) acc[0][0] += splat(x[i]) * loadv(tap + i * a.ldw);
          }
        }
        if (act.any) pw_activate<1, 1>(acc, act);
        wg_store(out + (oy * a.ow + ox) * a.oc + j0, acc[0][0], a.oc - j0);
      }
    }
  }
}

void winograd_tiles(const pt2rt::kernels::WinogradConv& a, int64_t t0, int64_t t1, float* scratch) {
  const int64_t tiles = t1 - t0, kc = (a.c + 15) / 16 * 16, cols = (a.oc + L - 1) / L * L;
  float* v_all = scratch;                  // [16][tiles][kc]
  float* m_all = v_all + 16 * tiles * kc;  // [16][tiles][ldw]
  const vf zero = splat(0.0f);
  for (int64_t i = 0; i < tiles; ++i) {
    const WgTile tile = wg_tile(a, t0 + i);
    const float* image = a.in + tile.image * a.h * a.w * a.c;
    const float* at[4][4];  // each input's channels, null in the padding
    for (int r = 0; r < 4; ++r) {
      for (int s = 0; s < 4; ++s) {
        const int64_t iy = tile.y0 - a.pad_h + r, ix = tile.x0 - a.pad_w + s;
        at[r][s] = iy >= 0 && iy < a.h && ix >= 0 && ix < a.w ? image + (iy * a.w + ix) * a.c : nullptr;
      }
    }
    for (int64_t c0 = 0; c0 < a.c; c0 += L) {
      const int64_t n = a.c - c0;
      vf d[4][4], v[16];
      for (int r = 0; r < 4; ++r)
        for (int s = 0; s < 4; ++s) d[r][s] = at[r][s] != nullptr ? wg_load(at[r][s] + c0, n) : zero;
      wg_input_transform(d, v);
      for (int p = 0; p < 16; ++p) storev(v_all + (p * tiles + i) * kc + c0, v[p]);
    }
  }
  for (int p = 0; p < 16; ++p) {
    const pt2rt::kernels::PointwiseRows rows{v_all + p * tiles * kc, kc, a.c, a.weight + p * a.c * a.ldw, a.ldw,
                                             nullptr, m_all + p * tiles * a.ldw, a.ldw, tiles, cols,
                                             pt2rt::kernels::kPointwiseNone};
    pointwise(rows);
  }
  const PwActivation act = pw_activation(a.activation);
  for (int64_t i = 0; i < tiles; ++i) {
    const WgTile tile = wg_tile(a, t0 + i);
    float* out = a.out + tile.image * a.oh * a.ow * a.oc;
    const int64_t ny = a.oh - tile.y0 < 2 ? 1 : 2, nx = a.ow - tile.x0 < 2 ? 1 : 2;
    vf sum = zero;  // of the tile's outputs: not finite where one is not
    for (int64_t j0 = 0; j0 < a.oc; j0 += L) {
      vf m[16], y[2][2];
      for (int p = 0; p < 16; ++p) m[p] = loadv(m_all + (p * tiles + i) * a.ldw + j0);
      wg_output_transform(m, y);
      const vf b = a.bias != nullptr ? wg_load(a.bias + j0, a.oc - j0) : zero;
      for (int64_t k = 0; k < ny; ++k) {
        for (int64_t l = 0; l < nx; ++l) {
          vf z[1][1] = {{y[k][l] + b}};
          sum += z[0][0];
          if (act.any) pw_activate<1, 1>(z, act);
          wg_store(out + ((tile.y0 + k) * a.ow + tile.x0 + l) * a.oc + j0, z[0][0], a.oc - j0);
        }
      }
    }
    float probe = 0.0f;
    for (int l = 0; l < L; ++l) probe += sum[l] * 0.0f;
    // an inf or NaN input reaches, through the transforms, exactly the outputs whose 3x3 inputs hold it (B^T's and
    // A^T's zeros), but as NaN where eager may have inf: those tiles again, directly
    if (probe != probe) wg_direct_tile(a, tile, act);
  }
}

}  // namespace
