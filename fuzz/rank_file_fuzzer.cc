// libFuzzer target: a rank file (the bytes of rank-0.jsonl) through SampleFileReader.
//
// Properties: no crash, memory bounded by the reader's line limit; the samples read do not
// depend on the size of the chunks the file is read in (lines that straddle chunks, a last line
// without a newline); every line is either a sample or counted malformed, with a reason.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "laggard/jsonl.hpp"

namespace {

struct Read {
  std::vector<std::string> lines;  // each sample, written back
  std::size_t malformed = 0;
  std::size_t lines_seen = 0;
};

Read read_all(const std::string& path, std::size_t chunk) {
  Read r;
  laggard::SampleFileReader reader(path, chunk);
  laggard::StepSample s;
  while (reader.next(s)) {
    std::string line;
    laggard::append_sample_json(s, line);
    r.lines.push_back(std::move(line));
  }
  r.malformed = reader.malformed();
  r.lines_seen = reader.lines();
  for (const auto& e : reader.errors())
    if (e.what.empty() || e.line == 0) laggard::fuzz::fail("a malformed line without a reason");
  if (reader.errors().size() > r.malformed) laggard::fuzz::fail("more errors than malformed");
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks a small chunk size (1-256 bytes), the rest is the file.
  const std::size_t small = 1 + data[0];
  const std::string path = (laggard::fuzz::scratch_dir() / "rank-0.jsonl").string();
  laggard::fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data) + 1,
                                                   size - 1));
  const Read a = read_all(path, small);
  const Read b = read_all(path, 1 << 20);
  if (a.lines != b.lines) laggard::fuzz::fail("the samples depend on the chunk size");
  if (a.malformed != b.malformed) laggard::fuzz::fail("malformed count depends on the chunk size");
  if (a.lines.size() + a.malformed > a.lines_seen) laggard::fuzz::fail("more results than lines");
  return 0;
}
