// The CRC-32 of gzip (the polynomial 0xedb88320, reflected), 16 bytes a step by carry-less
// multiplication where the processor has it (PCLMULQDQ: every x86-64 since 2010), zlib's crc32_z
// elsewhere. zlib's own is table-driven, a few bytes a cycle: at the compression ratios of
// profiler traces (20× and more) it cost as much as inflating them (docs/performance.md).
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LAGGARD_CRC_CLMUL 1
#endif

namespace laggard::detail {

#if defined(LAGGARD_CRC_CLMUL)
__attribute__((target("pclmul,sse4.1"))) inline __m128i crc32_load(const unsigned char* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}
// x's two halves multiplied by k's, plus `next`: 128 bits of the message folded 128 bits on.
__attribute__((target("pclmul,sse4.1"))) inline __m128i crc32_step(__m128i x, __m128i k,
                                                                   __m128i next) {
  const __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
  const __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
  return _mm_xor_si128(_mm_xor_si128(hi, lo), next);
}

// Folding four 128-bit lanes at a time, then one, then Barrett reduction to 32 bits: the method
// of Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" (Intel, 2009),
// with the constants for the reflected gzip polynomial. `crc` and the result are not inverted;
// n >= 64 and a multiple of 16.
__attribute__((target("pclmul,sse4.1"))) inline std::uint32_t crc32_fold(const unsigned char* p,
                                                                        std::size_t n,
                                                                        std::uint32_t crc) {
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
  __m128i x1 = _mm_xor_si128(crc32_load(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x2 = crc32_load(p + 16), x3 = crc32_load(p + 32), x4 = crc32_load(p + 48);
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    x1 = crc32_step(x1, k1k2, crc32_load(p));
    x2 = crc32_step(x2, k1k2, crc32_load(p + 16));
    x3 = crc32_step(x3, k1k2, crc32_load(p + 32));
    x4 = crc32_step(x4, k1k2, crc32_load(p + 48));
  }
  x1 = crc32_step(x1, k3k4, x2);
  x1 = crc32_step(x1, k3k4, x3);
  x1 = crc32_step(x1, k3k4, x4);
  for (; n >= 16; p += 16, n -= 16) x1 = crc32_step(x1, k3k4, crc32_load(p));
  // 128 bits to 64, then Barrett reduction to 32.
  const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
  __m128i x2b = _mm_clmulepi64_si128(x1, k3k4, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2b);
  x2b = _mm_srli_si128(x1, 4);
  x1 = _mm_and_si128(x1, mask32);
  x1 = _mm_clmulepi64_si128(x1, k5k0, 0x00);
  x1 = _mm_xor_si128(x1, x2b);
  x2b = _mm_and_si128(x1, mask32);
  x2b = _mm_clmulepi64_si128(x2b, poly, 0x10);
  x2b = _mm_and_si128(x2b, mask32);
  x2b = _mm_clmulepi64_si128(x2b, poly, 0x00);
  x1 = _mm_xor_si128(x1, x2b);
  return static_cast<std::uint32_t>(_mm_extract_epi32(x1, 1));
}

inline bool crc32_has_clmul() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}
#endif

/// The CRC-32 of [p, p + n) continued from `crc` (0 to start), as zlib's crc32_z computes it.
inline std::uint32_t gzip_crc32(std::uint32_t crc, const unsigned char* p, std::size_t n) {
#if defined(LAGGARD_CRC_CLMUL)
  if (n >= 64 && crc32_has_clmul()) {
    const std::size_t bulk = n & ~std::size_t{15};
    crc = ~crc32_fold(p, bulk, ~crc);
    p += bulk;
    n -= bulk;
  }
#endif
  return n == 0 ? crc : static_cast<std::uint32_t>(crc32_z(crc, p, n));
}

}  // namespace laggard::detail
