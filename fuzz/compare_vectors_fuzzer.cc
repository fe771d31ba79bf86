// libFuzzer target: `laggard compare --baseline-vector B --current-vector C [--stages S]
// [--json]`, the text of the three options from the input.
//
// The input is split at each byte 0x1e into the baseline vector, the current vector and the
// stage names (an absent or empty part is left out); the last byte's low bit turns on --json.
// Properties: no crash, no exception but the documented refusal (UsageError: exit 2, a reason).
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string part[3];
  std::size_t start = 0;
  for (int i = 0; i < 3 && start <= input.size(); ++i) {
    const std::size_t end = std::min(input.find('\x1e', start), input.size());
    part[i] = std::string(input.substr(start, end - start));
    start = end + 1;
  }
  if (part[0].empty() && part[1].empty()) return 0;  // no vector: the run mode (run_dir_fuzzer)
  laggard::cli::CompareArgs args;
  args.baseline_vector = part[0];
  args.current_vector = part[1];
  args.stages = part[2];
  args.json = size > 0 && (data[size - 1] & 1);
  std::ostringstream sink;
  std::streambuf* out = std::cout.rdbuf(sink.rdbuf());
  try {
    const int rc = laggard::cli::run_compare(args);
    if (rc != laggard::cli::kExitOk) laggard::fuzz::fail("exit status " + std::to_string(rc));
  } catch (const laggard::cli::UsageError& e) {
    if (e.what.empty()) laggard::fuzz::fail("a refusal without a reason");
  }
  std::cout.rdbuf(out);
  return 0;
}
