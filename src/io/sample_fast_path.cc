// The fast path of the sample line parser (laggard/detail/sample_parser.hpp).
//
// simdjson's On-Demand parser first indexes every structural character of a line (a pass over
// it and a call into the library per line), then walks the fields through that index: about
// 0.7 µs for a line of 8 stages, most of `laggard analyze`'s reading. The lines laggard writes
// are plain (ASCII, no escapes, no whitespace, a handful of known fields), so one forward pass
// that checks each byte as it goes takes the line in under half of that (docs/performance.md).
// It decides nothing about doubtful input: whatever it does not recognise is handed back, whole,
// to the general parser.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "io/json_scan.hpp"
#include "laggard/detail/sample_parser.hpp"
#include "laggard/export.hpp"
#include "laggard/jsonl.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define LAGGARD_ALWAYS_INLINE inline __attribute__((always_inline))

namespace laggard::detail {
namespace {

// Nesting allowed inside an unknown field before the line goes to the general parser (which
// allows 1000 levels and words the error past that).
constexpr int kMaxSkipDepth = 32;
// More digits than this in an integer go to the general parser: every value below 10^18 fits
// in an int64, and nothing here needs to know how simdjson treats larger ones.
constexpr int kMaxIntegerDigits = 18;
// Significant digits below which a decimal is an exact double (10^15 < 2^53).
constexpr int kMaxExactDigits = 15;
// Characters below which a JSON number without exponent is within a double's range.
constexpr std::ptrdiff_t kMaxPlainDecimal = 300;

// a[0, n) == b[0, n). Names and keys are short: two overlapping loads of each side instead of a
// call to memcmp, which cost more than the compare itself (18 to 40 such compares per line).
LAGGARD_ALWAYS_INLINE bool same_bytes(const char* a, const char* b, std::size_t n) {
  if (n >= 8 && n <= 16) {
    std::uint64_t a0, a1, b0, b1;
    std::memcpy(&a0, a, 8);
    std::memcpy(&b0, b, 8);
    std::memcpy(&a1, a + n - 8, 8);
    std::memcpy(&b1, b + n - 8, 8);
    return ((a0 ^ b0) | (a1 ^ b1)) == 0;
  }
  if (n >= 4 && n < 8) {
    std::uint32_t a0, a1, b0, b1;
    std::memcpy(&a0, a, 4);
    std::memcpy(&b0, b, 4);
    std::memcpy(&a1, a + n - 4, 4);
    std::memcpy(&b1, b + n - 4, 4);
    return ((a0 ^ b0) | (a1 ^ b1)) == 0;
  }
  if (n < 4) {
    for (std::size_t i = 0; i < n; ++i)
      if (a[i] != b[i]) return false;
    return true;
  }
#if defined(__SSE2__)
  if (n <= 32) {  // 17 to 32 bytes (a key with its separators): two overlapping 16-byte loads
    const auto load = [](const char* p) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    };
    const __m128i diff = _mm_or_si128(_mm_xor_si128(load(a), load(b)),
                                      _mm_xor_si128(load(a + n - 16), load(b + n - 16)));
    return _mm_movemask_epi8(_mm_cmpeq_epi8(diff, _mm_setzero_si128())) == 0xFFFF;
  }
#endif
  return std::memcmp(a, b, n) == 0;
}

// The fields of a sample and of a stage; bit positions in a `seen` mask.
enum Field : unsigned {
  kUnknown = 0,
  kSchema,
  kRank,
  kWorldSize,
  kStep,
  kHost,
  kCohort,
  kStepMs,
  kWork,
  kStages,
  kValues,
  kResources,
  kName,
  kKind,
  kMs,
  kCalls
};

template <std::size_t N>
bool is(std::string_view key, const char (&name)[N]) {
  return std::memcmp(key.data(), name, N - 1) == 0;
}

Field sample_field(std::string_view key) {
  switch (key.size()) {
    case 4:
      return is(key, "rank")   ? kRank
             : is(key, "step") ? kStep
             : is(key, "host") ? kHost
             : is(key, "work") ? kWork
                               : kUnknown;
    case 6:
      return is(key, "schema")   ? kSchema
             : is(key, "cohort") ? kCohort
             : is(key, "stages") ? kStages
             : is(key, "values") ? kValues
                                 : kUnknown;
    case 7:
      return is(key, "step_ms") ? kStepMs : kUnknown;
    case 9:
      return is(key, "resources") ? kResources : kUnknown;
    case 10:
      return is(key, "world_size") ? kWorldSize : kUnknown;
    default:
      return kUnknown;
  }
}

Field stage_field(std::string_view key) {
  switch (key.size()) {
    case 2:
      return is(key, "ms") ? kMs : kUnknown;
    case 4:
      return is(key, "name") ? kName : is(key, "kind") ? kKind : kUnknown;
    case 5:
      return is(key, "calls") ? kCalls : kUnknown;
    default:
      return kUnknown;
  }
}

// A forward cursor over one line. Every member returns false as soon as the text is not what
// it expects; the caller then gives the line up.
class Scanner {
 public:
  explicit Scanner(std::string_view line) : p_(line.data()), end_(line.data() + line.size()) {}

  // JSON whitespace. laggard writes none, so the test is one compare in the common case.
  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || *p_ == '\n')) {
      newline_ |= *p_ == '\n';
      ++p_;
    }
  }
  // Whether whitespace taken so far held a '\n' (a scan past the end of its line).
  bool took_newline() const { return newline_; }
  bool at_end() {
    skip_space();
    return p_ == end_;
  }
  bool consume(char c) {
    if (LAGGARD_LIKELY(p_ < end_ && *p_ == c)) {
      ++p_;
      return true;
    }
    skip_space();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }

  bool string(std::string_view& out) {
    if (!consume('"')) return false;
    const char* begin = p_;
    p_ = plain_end(p_, end_);
    if (p_ == end_ || *p_ != '"') return false;
    out = std::string_view(begin, static_cast<std::size_t>(p_ - begin));
    ++p_;
    return true;
  }

  // A `"key":` (the key plain, as every key laggard writes).
  bool key(std::string_view& out) { return string(out) && consume(':'); }

  // A non-negative JSON integer no larger than `max`. A fraction, an exponent, a sign or more
  // than kMaxIntegerDigits digits are left to the general parser.
  bool count(std::uint64_t max, std::uint64_t& out) {
    skip_space();
    if (p_ == end_ || !is_digit(*p_)) return false;
    std::uint64_t value = static_cast<std::uint64_t>(*p_++ - '0');
    if (value != 0) {  // a leading 0 stands alone (JSON): a digit after it fails at the caller
      int digits = 1;
      while (p_ < end_ && is_digit(*p_)) {
        if (++digits > kMaxIntegerDigits) return false;
        value = value * 10 + static_cast<std::uint64_t>(*p_++ - '0');
      }
    }
    if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    if (value > max) return false;
    out = value;
    return true;
  }

  // A non-negative JSON number (a time, a count of work).
  bool duration(double& out) { return number(out, /*negative_ok=*/false); }

  // A recorded value or resource reading: any JSON number, or one of the strings the writer
  // uses for what JSON has no number for ("NaN", "Infinity", "-Infinity").
  bool named_value(double& out) {
    skip_space();
    if (p_ == end_ || *p_ != '"') return number(out, /*negative_ok=*/true);
    if (take("\"NaN\"")) {
      out = std::numeric_limits<double>::quiet_NaN();
    } else if (take("\"Infinity\"")) {
      out = std::numeric_limits<double>::infinity();
    } else if (take("\"-Infinity\"")) {
      out = -std::numeric_limits<double>::infinity();
    } else {
      return false;
    }
    return true;
  }

  bool literal(std::string_view word) {
    skip_space();
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0)
      return false;
    p_ += word.size();
    return true;
  }
  bool next_is(char c) {
    skip_space();
    return p_ < end_ && *p_ == c;
  }

  const char* pos() const { return p_; }

  // Takes the n bytes at `text` when the line goes on with exactly those: a compare whose length
  // does not depend on the line, as take()'s.
  bool take_bytes(const char* text, std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n || !same_bytes(p_, text, n)) return false;
    p_ += n;
    return true;
  }

  // Takes `text` when the line goes on with exactly that (no whitespace). A compare of constant
  // length: the position after it does not wait for the line's bytes, so the scan runs ahead
  // while they are checked, where scanning for a token's end would wait for each one.
  template <std::size_t N>
  bool take(const char (&text)[N]) {
    constexpr std::size_t n = N - 1;
    if (static_cast<std::size_t>(end_ - p_) < n || !same_bytes(p_, text, n)) return false;
    p_ += n;
    return true;
  }

  // Takes the string `expected` (with its quotes) when the line goes on with it, plain. Names,
  // kinds, hosts and cohorts repeat from line to line: the previous line's value is the guess.
  bool same_string(std::string_view expected) {
    const std::size_t n = expected.size();
    if (static_cast<std::size_t>(end_ - p_) < n + 2 || p_[0] != '"' || p_[n + 1] != '"' ||
        !same_bytes(p_ + 1, expected.data(), n) || !all_plain(p_ + 1, n))
      return false;
    p_ += n + 2;
    return true;
  }

  // One of the kinds laggard writes, with its quotes: "compute", "communication", "data",
  // "other" (compares of constant length, picked by the first letter).
  bool kind_word(StageKind& kind) {
    if (end_ - p_ < 2 || *p_ != '"') return false;
    const char first = p_[1];
    if (first == 'c' && take("\"compute\"")) {
      kind = StageKind::compute;
    } else if (first == 'c' && take("\"communication\"")) {
      kind = StageKind::communication;
    } else if (first == 'd' && take("\"data\"")) {
      kind = StageKind::data;
    } else if (first == 'o' && take("\"other\"")) {
      kind = StageKind::other;
    } else {
      return false;
    }
    return true;
  }

  // Any JSON value, checked and passed over (fields laggard does not read must still be valid:
  // the general parser refuses a line with broken JSON anywhere).
  bool skip_value(int depth) {
    skip_space();
    if (p_ == end_) return false;
    switch (*p_) {
      case '"': {
        std::string_view text;
        return string(text);
      }
      case '{': {
        if (depth >= kMaxSkipDepth) return false;
        ++p_;
        if (next_is('}')) return consume('}');
        do {
          std::string_view name;
          if (!key(name) || !skip_value(depth + 1)) return false;
        } while (consume(','));
        return consume('}');
      }
      case '[': {
        if (depth >= kMaxSkipDepth) return false;
        ++p_;
        if (next_is(']')) return consume(']');
        do {
          if (!skip_value(depth + 1)) return false;
        } while (consume(','));
        return consume(']');
      }
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default: {
        const char* begin = p_;
        bool integer = true, exponent = false;
        if (!number_text(/*negative_ok=*/true, &integer, &exponent)) return false;
        if (integer) {
          const auto digits = p_ - begin - (*begin == '-' ? 1 : 0);
          return digits <= kMaxIntegerDigits;
        }
        // Without an exponent, a number shorter than kMaxPlainDecimal cannot leave a double's
        // range (over 1.8e308 takes 309 digits; under 4.9e-324, 324): no need to convert it.
        if (!exponent && p_ - begin < kMaxPlainDecimal) return true;
        double value;
        const auto result = std::from_chars(begin, p_, value);
        return result.ec == std::errc() && result.ptr == p_;
      }
    }
  }

 private:
  // A JSON number as the nearest double. std::from_chars finds its end and rounds correctly, as
  // simdjson does, so both give the same double; what it accepts beyond JSON's grammar (a '+',
  // a leading '.', leading zeros, "1." or "1.e5", inf, nan) is refused after. Out of range: not
  // here either. The short way is inlined where a number is expected (a call per number cost
  // ~6 % of reading other writers' lines); the general way is not.
  LAGGARD_ALWAYS_INLINE bool number(double& out, bool negative_ok) {
    skip_space();
    const char* begin = p_;
    const char* digits = negative_ok && p_ < end_ && *p_ == '-' ? p_ + 1 : p_;
    if (digits == end_ || !is_digit(*digits)) return false;
    if (short_decimal(digits, out)) {
      if (digits != begin) out = -out;
      return true;
    }
    return long_number(begin, digits, out);
  }

  // number()'s general way: std::from_chars, then the JSON grammar's checks.
  __attribute__((noinline)) bool long_number(const char* begin, const char* digits, double& out) {
    const auto result = std::from_chars(begin, end_, out);
    if (result.ec != std::errc()) return false;
    p_ = result.ptr;
    // Longer than any number laggard writes (shortest round-trip text, at most 24 characters:
    // "-1.7976931348623157e+308"): left to the general parser, which reads it with
    // std::from_chars too (simdjson alone misreads some long fractions: see read_double there).
    if (p_ - begin > 24) return false;
    if (*digits == '0' && p_ - digits > 1 && is_digit(digits[1])) return false;
    if (!is_digit(p_[-1])) return false;  // "1." (with an exponent it would end in a digit)
    const void* dot = std::memchr(digits, '.', static_cast<std::size_t>(p_ - digits));
    if (dot != nullptr && !is_digit(static_cast<const char*>(dot)[1])) return false;  // "1.e5"
    // An exponent of more than 3 digits ("0e5888888888"): from_chars reads it (0, say) where
    // simdjson refuses it; the general parser decides.
    const char* e = digits;
    while (e < p_ && *e != 'e' && *e != 'E') ++e;
    if (e == p_) return true;
    const char* exponent = e + 1 + (e[1] == '+' || e[1] == '-');
    return p_ - exponent <= 3;
  }

  // A decimal without exponent of at most kMaxExactDigits digits (what laggard writes for times
  // kept in nanoseconds, and most writers' fixed-point text): its digits m and fraction length f
  // give m / 10^f, both exact doubles, so the one division rounds as from_chars does (Clinger's
  // fast path), at a fraction of its cost. Anything else (more digits, an exponent, text that is
  // not a JSON number) is left to number()'s general way, which gives the same double or refuses.
  LAGGARD_ALWAYS_INLINE bool short_decimal(const char* digits, double& out) {
    static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                        1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    // The lengths first (cheap), the value only for a number short enough.
    int whole, fraction = 0;
    const char* q;
#if defined(__SSE2__)
    if (end_ - digits >= 16) {
      // Where the line has 16 bytes: which of them are digits and which a '.', from one load,
      // so that the lengths wait on the text once, not on one scan after another.
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(digits));
      const __m128i nine = _mm_set1_epi8(9);
      const __m128i value = _mm_sub_epi8(v, _mm_set1_epi8('0'));
      const auto digit = static_cast<unsigned>(
          _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(value, nine), nine)));
      const auto dot = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('.'))));
      whole = *digits == '0' ? 1 : __builtin_ctz(~digit);  // "01": the general way's
      q = digits + whole;
      if ((dot >> whole) & 1u) {
        // Digits past the 16 bytes are not seen: the check of the byte after q below refuses.
        fraction = __builtin_ctz(~(digit >> (whole + 1)));
        if (fraction == 0) return false;
        q += 1 + fraction;
      }
    } else
#endif
    {
      whole = *digits == '0' ? 1 : digit_span(digits);  // "01": the general way's
      q = digits + whole;
      if (q < end_ && *q == '.') {
        fraction = digit_span(q + 1);
        if (fraction == 0) return false;
        q += 1 + fraction;
      }
    }
    // digit_span stops at 16, so a digit may follow. m has at most whole + fraction digits (a
    // leading 0 counted): at most kMaxExactDigits gives m < 10^15 < 2^53.
    if (whole + fraction > kMaxExactDigits) return false;
    if (q < end_ && (is_digit(*q) || *q == 'e' || *q == 'E' || *q == '.')) return false;
    std::uint64_t m = digits_value(digits, whole);
    if (fraction > 0) m = m * kScale[fraction] + digits_value(digits + whole + 1, fraction);
    out = static_cast<double>(m) / kPow10[fraction];
    p_ = q;
    return true;
  }

  static constexpr std::uint64_t kScale[] = {1,
                                             10,
                                             100,
                                             1000,
                                             10000,
                                             100000,
                                             1000000,
                                             10000000,
                                             100000000,
                                             1000000000,
                                             10000000000,
                                             100000000000,
                                             1000000000000,
                                             10000000000000,
                                             100000000000000,
                                             1000000000000000};

  static constexpr bool kSwar = kSwarDigits;

  // How many decimal digits start at q, up to 16 (json_scan.hpp: eight bytes at a time).
  int digit_span(const char* q) const {
    int total = 0;
    for (int round = 0; round < 2; ++round, q += 8) {
      int k = 0;
      if (kSwar && end_ - q >= 8) {
        k = leading_digits8(q);
      } else {
        while (k < 8 && q + k < end_ && is_digit(q[k])) ++k;
      }
      total += k;
      if (k < 8) break;
    }
    return total;
  }

  // The value of the n digits at q (n <= 15, all digits).
  std::uint64_t digits_value(const char* q, int n) const {
    std::uint64_t value = 0;
    if (n > 8) {
      value = eight_digits(q, 8) * kScale[n - 8];
      q += 8;
      n -= 8;
    }
    return value + eight_digits(q, n);
  }

  // The value of the n <= 8 digits at q.
  std::uint64_t eight_digits(const char* q, int n) const {
    if (kSwar && end_ - q >= 8) {
      std::uint64_t v;
      std::memcpy(&v, q, 8);
      v <<= 8 * (8 - n);  // the n digits on top, zero bytes (zero digits) below them
      v = ((v & 0x0F0F0F0F0F0F0F0Fu) * 2561) >> 8;
      v = ((v & 0x00FF00FF00FF00FFu) * 6553601) >> 16;
      return ((v & 0x0000FFFF0000FFFFu) * 42949672960001u) >> 32;
    }
    std::uint64_t value = 0;
    for (int i = 0; i < n; ++i) value = value * 10 + static_cast<std::uint64_t>(q[i] - '0');
    return value;
  }

  bool all_plain(const char* p, std::size_t n) const {
#if defined(__SSE2__)
    if (n <= 16 && end_ - p >= 16) {
      const int mask = stop_mask(p) & ((1 << n) - 1);
      return mask == 0;
    }
#endif
    return plain_end(p, p + n) == p + n;
  }

  // Passes over the text of a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number_text(bool negative_ok, bool* integer = nullptr, bool* exponent = nullptr) {
    if (p_ < end_ && *p_ == '-') {
      if (!negative_ok) return false;
      ++p_;
    }
    if (p_ == end_ || !is_digit(*p_)) return false;
    if (*p_++ != '0') p_ = digits_end(p_, end_);
    bool whole = true;
    if (p_ < end_ && *p_ == '.') {
      whole = false;
      if (++p_ == end_ || !is_digit(*p_)) return false;
      p_ = digits_end(p_, end_);
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      whole = false;
      if (exponent) *exponent = true;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) return false;
      p_ = digits_end(p_, end_);
    }
    if (integer) *integer = whole;
    return true;
  }

  const char* p_;
  const char* end_;
  bool newline_ = false;
};

constexpr unsigned bit(Field f) { return 1u << f; }

// `{"name":value,...}` into `out`, reusing its entries. A name given twice is the general
// parser's to refuse.
bool named_values(Scanner& s, std::vector<NamedValue>& out) {
  if (!s.consume('{')) return false;
  std::size_t count = 0;
  if (s.next_is('}')) {
    s.consume('}');
  } else {
    do {
      std::string_view name;
      double value;
      if (!s.key(name) || !s.named_value(value)) return false;
      for (std::size_t i = 0; i < count; ++i)
        if (out[i].name == name) return false;
      if (count == out.size()) out.emplace_back();
      NamedValue& slot = out[count++];
      if (slot.name != name) slot.name.assign(name.data(), name.size());
      slot.value = value;
    } while (s.consume(','));
    if (!s.consume('}')) return false;
  }
  out.resize(count);
  return true;
}

// ---- the layout laggard writes (append_sample_json) -------------------------------------------

// A stage as laggard writes it: {"name":"...","kind":"...","ms":...,"calls":...}. Leaves `stage`
// as it was when the text is anything else.
bool canonical_stage(Scanner& s, StageTime& stage) {
  if (!s.take("{\"name\":")) return false;
  std::string_view name;
  const bool same_name = s.same_string(stage.name);
  if (!same_name && !s.string(name)) return false;
  if (!s.take(",\"kind\":")) return false;
  StageKind kind;
  if (!s.kind_word(kind)) {
    std::string_view text;
    if (!s.string(text)) return false;
    const auto parsed = parse_stage_kind(text);
    if (!parsed) return false;
    kind = *parsed;
  }
  double ms;
  std::uint64_t calls;
  if (!s.take(",\"ms\":") || !s.duration(ms) || !s.take(",\"calls\":") ||
      !s.count(std::numeric_limits<std::uint32_t>::max(), calls) || !s.take("}"))
    return false;
  if (!same_name) stage.name.assign(name.data(), name.size());
  stage.kind = kind;
  stage.ms = ms;
  stage.calls = static_cast<std::uint32_t>(calls);
  return true;
}

// A whole line in append_sample_json's layout: its fields in its order, no whitespace. With
// `line_end`, the scanner's text runs on past the line, whose end is not known yet: the line must
// end after the sample's '}' (and JSON whitespace other than '\n'), at a '\n' or, where
// `text_ends` says the text ends there, at the end of the text; *line_end is then that end.
bool canonical_sample(Scanner& s, StepSample& out, const char** line_end = nullptr,
                      bool text_ends = false) {
  std::uint64_t rank, world_size, step;
  double step_ms, work = std::numeric_limits<double>::quiet_NaN();
  std::string_view host, cohort;
  if (!s.take("{\"schema\":\"laggard.sample/1\",\"rank\":") ||
      !s.count(static_cast<std::uint64_t>(std::numeric_limits<int>::max()), rank) ||
      !s.take(",\"world_size\":") ||
      !s.count(static_cast<std::uint64_t>(std::numeric_limits<int>::max()), world_size) ||
      world_size < 1 || rank >= world_size || !s.take(",\"step\":") ||
      !s.count(static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), step) ||
      !s.take(",\"host\":"))
    return false;
  const bool same_host = s.same_string(out.host);
  if ((!same_host && !s.string(host)) || !s.take(",\"cohort\":")) return false;
  const bool same_cohort = s.same_string(out.cohort);
  if ((!same_cohort && !s.string(cohort)) || !s.take(",\"step_ms\":") || !s.duration(step_ms))
    return false;
  if (s.take(",\"work\":") && !s.duration(work)) return false;
  if (!s.take(",\"stages\":[")) return false;
  std::size_t count = 0;
  if (!s.take("]")) {
    do {
      if (count == out.stages.size()) out.stages.emplace_back();
      if (!canonical_stage(s, out.stages[count])) return false;
      ++count;
    } while (s.take(","));
    if (!s.take("]")) return false;
  }
  out.stages.resize(count);
  // Then the optional values and resources, in that order.
  if (s.take(",\"values\":")) {
    if (!named_values(s, out.values)) return false;
  } else {
    out.values.clear();
  }
  if (s.take(",\"resources\":")) {
    if (!named_values(s, out.resources)) return false;
  } else {
    out.resources.clear();
  }
  if (!s.take("}")) return false;
  if (line_end) {
    // What at_end() would skip within the line, then the line's end.
    const char* p = s.pos();
    const char* end = *line_end;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) ++p;
    if (s.took_newline() || (p < end ? *p != '\n' : !text_ends)) return false;
    *line_end = p;
  } else if (!s.at_end()) {
    return false;
  }
  out.rank = static_cast<int>(rank);
  out.world_size = static_cast<int>(world_size);
  out.step = static_cast<std::int64_t>(step);
  out.step_ms = step_ms;
  out.work = work;
  if (!same_host) out.host.assign(host.data(), host.size());
  if (!same_cohort) out.cohort.assign(cohort.data(), cohort.size());
  return true;
}

// ---- any order, any extra fields --------------------------------------------------------------

// The keys of the last line read the any-order way, per thread: each field's text from the end
// of the value before it (or from the line's or the stage's start) up to its own value, with the
// field it names. A writer keeps one layout, so the next line is first matched against these
// texts, whole: a compare of known length per field instead of a scan of the key, its quotes
// and the whitespace around it. A text is kept only as read and checked by the scan, so a
// match takes exactly what the scan would have; a line that differs is scanned from there on,
// and its texts replace the old ones.
struct KeyText {
  static constexpr std::size_t kMaxBytes = 30;
  char bytes[kMaxBytes];
  unsigned char size;
  Field field;
};
struct Layout {
  static constexpr int kMaxKeys = 16;
  KeyText sample[kMaxKeys];
  KeyText stage[kMaxKeys];
  int sample_keys = 0, stage_keys = 0;
};
thread_local Layout layout;

// The field at key position i: from `keys` when the line goes on with its text, else scanned
// (a ',' before every key but the first, then `"key":`) and its text kept in `keys` for the next
// line. kNone: the object ends here (no ','); false: not a key where one must be.
constexpr Field kNone = static_cast<Field>(31);
template <typename Classify>
bool next_key(Scanner& s, KeyText* keys, int& count, int i, Classify classify, Field& field) {
  if (i < count && s.take_bytes(keys[i].bytes, keys[i].size)) {
    field = keys[i].field;
    return true;
  }
  const char* from = s.pos();
  if (i == 0) {
    if (!s.consume('{') || s.next_is('}')) return false;
  } else if (!s.consume(',')) {
    field = kNone;
    return true;
  }
  std::string_view key;
  if (!s.key(key)) return false;
  field = classify(key);
  s.skip_space();
  const auto size = static_cast<std::size_t>(s.pos() - from);
  if (i < Layout::kMaxKeys && size <= KeyText::kMaxBytes) {
    std::memcpy(keys[i].bytes, from, size);
    keys[i].size = static_cast<unsigned char>(size);
    keys[i].field = field;
    count = i + 1;
  } else {
    count = std::min(count, i);
  }
  return true;
}

bool parse_stage(Scanner& s, StageTime& stage, Layout& known) {
  unsigned seen = 0;
  std::string_view name, kind_text;
  bool same_name = false, kind_word = false;
  StageKind kind = StageKind::other;
  double ms = 0.0;
  std::uint64_t calls = 1;  // missing: entered once
  for (int i = 0;; ++i) {
    Field field;
    if (!next_key(s, known.stage, known.stage_keys, i, stage_field, field)) return false;
    if (field == kNone) break;
    if (field != kUnknown) {
      if (seen & bit(field)) return false;  // a repeated field: the general parser's rules
      seen |= bit(field);
    }
    bool ok;
    switch (field) {
      case kName:
        // Names repeat line after line: the previous line's name at this place is the guess.
        s.skip_space();
        same_name = s.same_string(stage.name);
        ok = same_name || s.string(name);
        break;
      case kKind:
        s.skip_space();
        kind_word = s.kind_word(kind);
        ok = kind_word || s.string(kind_text);
        break;
      case kMs:
        ok = s.duration(ms);
        break;
      case kCalls:
        ok = s.count(std::numeric_limits<std::uint32_t>::max(), calls);
        break;
      default:
        ok = s.skip_value(1);
    }
    if (!ok) return false;
  }
  if (!s.consume('}')) return false;
  if ((seen & (bit(kName) | bit(kMs))) != (bit(kName) | bit(kMs))) return false;
  if (!(seen & bit(kKind))) {
    kind = default_stage_kind(same_name ? std::string_view(stage.name) : name);
  } else if (!kind_word) {
    const auto parsed = parse_stage_kind(kind_text);
    if (!parsed) return false;
    kind = *parsed;
  }
  if (!same_name) stage.name.assign(name.data(), name.size());
  stage.kind = kind;
  stage.ms = ms;
  stage.calls = static_cast<std::uint32_t>(calls);
  return true;
}

bool parse_stages(Scanner& s, StepSample& out, Layout& known) {
  if (!s.consume('[')) return false;
  std::size_t count = 0;
  if (s.next_is(']')) {
    s.consume(']');
  } else {
    do {
      if (count == out.stages.size()) out.stages.emplace_back();
      if (!parse_stage(s, out.stages[count], known)) return false;
      ++count;
    } while (s.consume(','));
    if (!s.consume(']')) return false;
  }
  out.stages.resize(count);
  return true;
}

void assign(std::string& target, bool present, std::string_view text) {
  if (!present)
    target.clear();
  else if (target != text)
    target.assign(text.data(), text.size());
}

// Fields in any order, unknown fields checked and passed over, whitespace anywhere JSON allows.
bool any_sample(Scanner& s, StepSample& out) {
  Layout& known = layout;
  unsigned seen = 0;
  std::uint64_t rank = 0, world_size = 0, step = 0;
  double step_ms = 0.0, work = std::numeric_limits<double>::quiet_NaN();
  std::string_view host, cohort;
  for (int i = 0;; ++i) {
    Field field;
    if (!next_key(s, known.sample, known.sample_keys, i, sample_field, field)) return false;
    if (field == kNone) break;
    if (field != kUnknown) {
      if (seen & bit(field)) return false;
      seen |= bit(field);
    }
    bool ok;
    switch (field) {
      case kSchema: {
        std::string_view schema;
        ok = s.string(schema) && schema.size() == kSampleSchema.size() &&
             same_bytes(schema.data(), kSampleSchema.data(), schema.size());
        break;
      }
      case kRank:
        ok = s.count(static_cast<std::uint64_t>(std::numeric_limits<int>::max()), rank);
        break;
      case kWorldSize:
        ok = s.count(static_cast<std::uint64_t>(std::numeric_limits<int>::max()), world_size) &&
             world_size >= 1;
        break;
      case kStep:
        ok = s.count(static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), step);
        break;
      case kHost:
        ok = s.string(host);
        break;
      case kCohort:
        ok = s.string(cohort);
        break;
      case kStepMs:
        ok = s.duration(step_ms);
        break;
      case kWork:
        // null is how some writers spell "not recorded" (the general parser's rule too).
        ok = s.next_is('n') ? s.literal("null") : s.duration(work);
        break;
      case kStages:
        ok = parse_stages(s, out, known);
        break;
      case kValues:
        ok = named_values(s, out.values);
        break;
      case kResources:
        ok = named_values(s, out.resources);
        break;
      default:
        ok = s.skip_value(1);
    }
    if (!ok) return false;
  }
  if (!s.consume('}') || !s.at_end()) return false;
  constexpr unsigned kRequired =
      bit(kSchema) | bit(kRank) | bit(kWorldSize) | bit(kStep) | bit(kStepMs) | bit(kStages);
  if ((seen & kRequired) != kRequired || rank >= world_size) return false;
  out.rank = static_cast<int>(rank);
  out.world_size = static_cast<int>(world_size);
  out.step = static_cast<std::int64_t>(step);
  out.step_ms = step_ms;
  out.work = work;
  assign(out.host, (seen & bit(kHost)) != 0, host);
  assign(out.cohort, (seen & bit(kCohort)) != 0, cohort);
  if (!(seen & bit(kValues))) out.values.clear();
  if (!(seen & bit(kResources))) out.resources.clear();
  return true;
}

}  // namespace

const char* parse_sample_line_fast(const char* text, const char* end, bool text_ends,
                                   StepSample& out) {
  Scanner canonical(std::string_view(text, static_cast<std::size_t>(end - text)));
  const char* line_end = end;
  return canonical_sample(canonical, out, &line_end, text_ends) ? line_end : nullptr;
}

bool parse_sample_fast(std::string_view line, StepSample& out) {
  Scanner canonical(line);
  if (LAGGARD_LIKELY(canonical_sample(canonical, out))) return true;
  Scanner any(line);
  return any_sample(any, out);
}

}  // namespace laggard::detail
