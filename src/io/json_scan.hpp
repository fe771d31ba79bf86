// Byte scans shared by laggard's forward JSON readers (the rank-log fast path,
// sample_fast_path.cc, and the profiler-trace events, trace_reader.cc): plain string runs and
// digit runs found 16 or 8 bytes at a time, bytes counted 64 at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace laggard::detail {

inline bool is_digit(char c) { return static_cast<unsigned char>(c - '0') < 10; }

// A byte that may stand for itself inside a plain string: printable ASCII or DEL, neither the
// quote nor the backslash. (Control characters are invalid JSON; escapes and UTF-8 are valid but
// left to the general parsers, which unescape and check them.)
inline bool is_plain(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
}

#if defined(__SSE2__)
// Bit i set: p[i] is not plain, for the 16 bytes at p.
inline int stop_mask(const char* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
  const __m128i backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
  // Signed: bytes >= 0x80 are negative, so "below 0x20" also finds them.
  const __m128i control = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
  return _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control));
}
#endif

/// The first byte in [p, end) that is not plain (is_plain), or `end`: 16 bytes at a time where
/// the text has them (SSE2, part of every x86-64), 8 at a time elsewhere.
inline const char* plain_end(const char* p, const char* end) {
#if defined(__SSE2__)
  for (; end - p >= 16; p += 16)
    if (const int mask = stop_mask(p)) return p + __builtin_ctz(static_cast<unsigned>(mask));
#endif
  constexpr std::uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  for (; end - p >= 8; p += 8) {
    std::uint64_t x;
    std::memcpy(&x, p, 8);
    const std::uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    const std::uint64_t hit = ((q - ones) & ~q) | ((b - ones) & ~b) | ((x - ones * 0x20) & ~x) | x;
    if (hit & highs) break;
  }
  while (p < end && is_plain(*p)) ++p;
  return p;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
inline constexpr bool kSwarDigits = true;
#else
inline constexpr bool kSwarDigits = false;
#endif

/// How many of the 8 bytes at q (all readable) are decimal digits before the first that is not
/// (8: all are): a byte is a digit when its high nibble is 3 and adding 6 keeps it so.
inline int leading_digits8(const char* q) {
  std::uint64_t v;
  std::memcpy(&v, q, 8);
  const std::uint64_t other =
      ((v & 0xF0F0F0F0F0F0F0F0u) | (((v + 0x0606060606060606u) & 0xF0F0F0F0F0F0F0F0u) >> 4)) ^
      0x3333333333333333u;
  return other == 0 ? 8 : __builtin_ctzll(other) >> 3;
}

/// The first byte in [p, end) that is not a decimal digit, or `end`: 8 bytes at a time where the
/// text has them, not a branch per digit.
inline const char* digits_end(const char* p, const char* end) {
  if (kSwarDigits) {
    while (end - p >= 8) {
      const int k = leading_digits8(p);
      p += k;
      if (k < 8) return p;
    }
  }
  while (p < end && is_digit(*p)) ++p;
  return p;
}

/// How many bytes in [p, end) equal c: 64 at a time (SSE2), the matches summed in byte lanes and
/// widened once every 255 rounds.
inline std::size_t count_byte(const char* p, const char* end, char c) {
  std::size_t total = 0;
#if defined(__SSE2__)
  const __m128i needle = _mm_set1_epi8(c);
  const auto load = [](const char* q) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  };
  while (end - p >= 64) {
    const std::size_t rounds = std::min<std::size_t>(static_cast<std::size_t>(end - p) / 64, 255);
    __m128i a = _mm_setzero_si128(), b = a, d = a, e = a;
    for (std::size_t i = 0; i < rounds; ++i, p += 64) {
      a = _mm_sub_epi8(a, _mm_cmpeq_epi8(load(p), needle));
      b = _mm_sub_epi8(b, _mm_cmpeq_epi8(load(p + 16), needle));
      d = _mm_sub_epi8(d, _mm_cmpeq_epi8(load(p + 32), needle));
      e = _mm_sub_epi8(e, _mm_cmpeq_epi8(load(p + 48), needle));
    }
    const __m128i zero = _mm_setzero_si128();
    const __m128i sums = _mm_add_epi64(_mm_add_epi64(_mm_sad_epu8(a, zero), _mm_sad_epu8(b, zero)),
                                       _mm_add_epi64(_mm_sad_epu8(d, zero), _mm_sad_epu8(e, zero)));
    total += static_cast<std::size_t>(_mm_cvtsi128_si64(sums)) +
             static_cast<std::size_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums)));
  }
#endif
  for (; p < end; ++p) total += *p == c;
  return total;
}

}  // namespace laggard::detail
