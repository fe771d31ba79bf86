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

/// The fast path's layout of laggard's own lines, read from `text` before the line's end is
/// known (a file reader's buffer, [text, end)): where the text starts with a line in
/// append_sample_json's layout (its fields in its order, no whitespace but after the sample),
/// parses it into `out` and returns the line's end, its '\n' (or `end`, where `text_ends`: the
/// file's last line); nullptr for anything else, `out` then unspecified. Where it returns a
/// line's end, parse_sample_fast of that line gives the same sample.
LAGGARD_API const char* parse_sample_line_fast(const char* text, const char* end, bool text_ends,
                                               StepSample& out);

/// The general parser alone (simdjson On-Demand): every line, with the reason for a refusal.
/// Thread-safe (a parser per thread).
LAGGARD_API bool parse_sample_general(std::string_view line, StepSample& out, std::string& error);

}  // namespace laggard::detail
