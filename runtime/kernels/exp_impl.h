// Included after a file's vector prelude (L floats per vector, vf, splat, in its anonymous namespace): e^x on
// vectors, shared by the recurrent kernels (gates) and the pointwise kernel (SiLU, sigmoid).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace {

typedef uint32_t exp_vi __attribute__((vector_size(L * sizeof(uint32_t))));

// min(hi, max(lo, x)), x passed on where it is NaN: one instruction per bound on x86 (GCC leaves the ternary forms
// as a compare and a blend each, on the ports the products need)
inline vf clamp_or_nan(vf x, float lo, float hi) {
#if defined(__AVX512F__)
  const __m512 m = _mm512_max_ps(reinterpret_cast<__m512>(splat(lo)), reinterpret_cast<__m512>(x));
  return reinterpret_cast<vf>(_mm512_min_ps(reinterpret_cast<__m512>(splat(hi)), m));
#elif defined(__AVX__)
  const __m256 m = _mm256_max_ps(reinterpret_cast<__m256>(splat(lo)), reinterpret_cast<__m256>(x));
  return reinterpret_cast<vf>(_mm256_min_ps(reinterpret_cast<__m256>(splat(hi)), m));
#else
  const vf m = x < splat(lo) ? splat(lo) : x;
  return m > splat(hi) ? splat(hi) : m;
#endif
}

// e^x for the logistic forms, 1 / (1 + e^x) and x / (1 + e^x) (the gates, SiLU, sigmoid, tanh's large form):
// 2^n e^r with |r| <= ln2 / 2 and a degree-6 polynomial for e^r (1 + r + r^2 q(r), q fitted for the least largest
// relative error on that range: 3e-9, below float's rounding), within 1.2 ulp of e^x from -86 up to float's range
// (every float checked against double's: 0.91 ulp with FMA, 1.17 without), inf past it (sigmoid(-inf) 0, SiLU(-inf)
// NaN, as in eager), e^-86 below -86 (1 + e^x is 1 there in floats); NaN gives NaN without a test of its own (the
// clamps pass it, the polynomial keeps it).
inline vf exp_v(vf x) {
  const vf c = clamp_or_nan(x, -86.0f, 89.0f);
  // + 1.5 * 2^23 rounds to an integer n, which is then the float's low mantissa bits
  const vf t = c * splat(1.44269504088896341f) + splat(12582912.0f);
  const vf n = t - splat(12582912.0f);
  vf r = c - n * splat(0.693145751953125f);
  r = r - n * splat(1.428606765330187045e-06f);
  // 2 e^r: the coefficients doubled (exactly, so the roundings are e^r's), for 2^(n - 1) below
  vf p = splat(2 * 0.0013814613093566068f);
  p = p * r + splat(2 * 0.008368709961336308f);
  p = p * r + splat(2 * 0.041668387373896526f);
  p = p * r + splat(2 * 0.1666652068865686f);
  p = p * r + splat(2 * 0.49999993451626f);
  p = p * r + splat(2.0f);
  p = p * r + splat(2.0f);
  // 2^(n - 1) from t's bits (no conversion a NaN could reach): n reaches 128 where e^x overflows, past 2^n's largest
  // exponent (the product's rounding overflows to inf there)
  exp_vi bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits + 126) << 23;
  vf scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace
