// laggard — test seam: the two halves of SampleParser (laggard/jsonl.hpp), for tests that
// compare them. Not part of the stable API.
#pragma once

#include <string>
#include <string_view>

#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard::detail {

/// The fast path: parses `line` into `out` (reusing its buffers) when it is a well-formed sample
/// written plainly (ASCII strings without escapes, numbers within range, every required field
/// present once, nothing out of place), as laggard writes them. Returns false for every other
/// line, well-formed or not, and `out` is then unspecified: SampleParser hands such a line to the
/// general parser, which decides and explains. So this path never rejects, never words an error,
/// and must accept only lines the general parser accepts, with the same result
/// (tests/cpp/jsonl_test.cc and fuzz/sample_line_fuzzer.cc hold it to that). Reads only inside
/// `line`; no allocation beyond `out`'s. Thread-safe.
LAGGARD_API bool parse_sample_fast(std::string_view line, StepSample& out);

/// The general parser alone (simdjson On-Demand): every line, with the reason for a refusal.
/// Thread-safe (a parser per thread).
LAGGARD_API bool parse_sample_general(std::string_view line, StepSample& out, std::string& error);

}  // namespace laggard::detail
