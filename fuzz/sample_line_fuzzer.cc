// libFuzzer target: one line of a rank log (laggard.sample/1) through SampleParser.
//
// Properties: the parser never crashes and says why it refuses a line; a line it accepts is
// written back by append_sample_json as a line that parses to the same sample, field for field
// and bit for bit (the writer's shortest round-trip form of each double); a line its fast path
// takes is one the general (simdjson) parser accepts, giving the same sample.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_common.hpp"
#include "laggard/detail/sample_parser.hpp"
#include "laggard/jsonl.hpp"

namespace {

bool same_double(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

void check_same(const laggard::StepSample& a, const laggard::StepSample& b,
                const char* what = "in the round trip") {
  using laggard::fuzz::fail;
  const std::string in = what;
  if (a.rank != b.rank || a.world_size != b.world_size || a.step != b.step)
    fail("rank, world_size or step changed " + in);
  if (a.host != b.host || a.cohort != b.cohort) fail("host or cohort changed " + in);
  if (!same_double(a.step_ms, b.step_ms)) fail("step_ms changed " + in);
  if (!same_double(a.work, b.work)) fail("work changed " + in);
  if (a.stages.size() != b.stages.size()) fail("the number of stages changed " + in);
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    const auto &x = a.stages[i], &y = b.stages[i];
    if (x.name != y.name || x.kind != y.kind || x.calls != y.calls || !same_double(x.ms, y.ms))
      fail("stage " + std::to_string(i) + " changed " + in);
  }
  for (auto field : {&laggard::StepSample::values, &laggard::StepSample::resources}) {
    const auto &x = a.*field, &y = b.*field;
    if (x.size() != y.size()) fail("the number of values changed " + in);
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i].name != y[i].name || !same_double(x[i].value, y[i].value))
        fail("value " + std::to_string(i) + " changed " + in);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static laggard::SampleParser parser;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  laggard::StepSample sample, back, fast, general;
  std::string error;
  if (laggard::detail::parse_sample_fast(line, fast)) {
    if (!laggard::detail::parse_sample_general(line, general, error))
      laggard::fuzz::fail("the fast path took a line the general parser refuses: " + error);
    check_same(fast, general, "between the fast path and the general parser");
  }
  if (!parser.parse(line, sample, error)) {
    if (error.empty()) laggard::fuzz::fail("a refused line without a reason");
    return 0;
  }
  std::string written;
  const std::size_t left_out = laggard::append_sample_json(sample, written);
  if (left_out != 0) laggard::fuzz::fail("an accepted sample has a non-finite stage time");
  if (written.empty() || written.back() != '\n') laggard::fuzz::fail("no newline at the end");
  written.pop_back();
  if (written.find('\n') != std::string::npos) laggard::fuzz::fail("a newline inside the line");
  if (!parser.parse(written, back, error))
    laggard::fuzz::fail("the writer's line does not parse: " + error + ": " + written);
  check_same(sample, back);
  return 0;
}
