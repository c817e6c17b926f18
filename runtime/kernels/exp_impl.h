// Included after a file's vector prelude (L floats per vector, vf, splat, in its anonymous namespace): e^x on
// vectors, shared by the recurrent kernels (gates) and the pointwise kernel (SiLU, sigmoid).
#pragma once

#include <cstdint>
#include <cstring>

namespace {

typedef int32_t exp_vi __attribute__((vector_size(L * sizeof(int32_t))));

// e^x for |x| <= 87 (clamped there: the gates saturate long before), within 2 ulp: 2^n e^r with |r| <= ln2 / 2
// and a degree-7 polynomial for e^r. NaN comes back as NaN.
inline vf exp_v(vf x) {
  const vf lo = splat(-87.0f), hi = splat(87.0f);
  vf c = x < lo ? lo : x;
  c = c > hi ? hi : c;
  const vf shifter = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  c = x != x ? splat(0.0f) : c;  // NaN: the result is x (below); no NaN reaches the integer conversion
  const vf n = (c * splat(1.44269504088896341f) + shifter) - shifter;
  vf r = c - n * splat(0.693145751953125f);
  r = r - n * splat(1.428606765330187045e-06f);
  vf p = splat(1.0f / 5040);
  p = p * r + splat(1.0f / 720);
  p = p * r + splat(1.0f / 120);
  p = p * r + splat(1.0f / 24);
  p = p * r + splat(1.0f / 6);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const exp_vi bits = (__builtin_convertvector(n, exp_vi) + 127) << 23;
  vf scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const vf y = p * scale;
  return x != x ? x : y;
}

// e^x, inf past the float range (exp_v clamps at 87): what 1 + e^-x needs for x = -inf (sigmoid 0, SiLU NaN as in eager)
inline vf exp_v_inf(vf x) {
  const vf y = exp_v(x);
  return x > splat(88.7228394f) ? splat(__builtin_inff()) : y;
}

}  // namespace
