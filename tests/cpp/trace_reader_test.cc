// Tests for the profiler-trace reader (src/io/trace_reader.cc, src/io/run_source.cc): Kineto's
// variants, the streaming scanner, stage attribution, timelines, and what bad input gets.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <string>
#include <vector>

#include "laggard/source.hpp"
#include "laggard/trace.hpp"
#include "temp_dir.hpp"

namespace laggard {
namespace {

struct TempDir : laggard::testing::TempDir {
  TempDir() : laggard::testing::TempDir("laggard-trace-test") {}
};

const std::string kData = LAGGARD_TEST_DATA;
const std::string kExamples = std::string(LAGGARD_TEST_DATA) + "/../../examples";

// One complete event.
std::string ev(const std::string& cat, const std::string& name, long pid, long tid, double ts,
               double dur, const std::string& args = "") {
  std::string s = "{\"ph\": \"X\", \"cat\": \"" + cat + "\", \"name\": \"" + name +
                  "\", \"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(tid) +
                  ", \"ts\": " + std::to_string(ts) + ", \"dur\": " + std::to_string(dur);
  if (!args.empty()) s += ", \"args\": {" + args + "}";
  return s + "}";
}

std::string trace(const std::vector<std::string>& events, const std::string& head =
                      "\"distributedInfo\": {\"rank\": 3, \"world_size\": 4}, ") {
  std::string s = "{" + head + "\"traceEvents\": [\n";
  for (std::size_t i = 0; i < events.size(); ++i) s += (i ? ",\n" : "") + events[i];
  return s + "\n]}";
}

std::string corr(int c) { return "\"correlation\": " + std::to_string(c); }

// Two steps on the host (pid 1, tid 1), a forward annotation launching a kernel, an autograd
// thread (tid 2) launching a backward kernel, an NCCL kernel, a host-to-device copy.
std::vector<std::string> small_job() {
  return {
      ev("user_annotation", "ProfilerStep#5", 1, 1, 1000, 1000),
      ev("user_annotation", "ProfilerStep#6", 1, 1, 2000, 1000),
      ev("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1, 1,
         1000, 100),
      ev("user_annotation", "## forward ##", 1, 1, 1110, 200),
      ev("user_annotation", "## forward ##", 1, 1, 2110, 200),
      ev("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 1, 2, 1400, 50),
      ev("cpu_op", "aten::mm", 1, 2, 1410, 30),  // nested: ignored
      ev("cuda_runtime", "cudaMemcpyAsync", 1, 1, 1100, 5, corr(10)),
      ev("cuda_runtime", "cudaLaunchKernel", 1, 1, 1120, 5, corr(11)),
      ev("cuda_runtime", "cudaLaunchKernel", 1, 2, 1420, 5, corr(12)),
      ev("cuda_runtime", "cudaLaunchKernelExC", 1, 2, 1440, 5, corr(13)),
      ev("cuda_runtime", "cudaLaunchKernel", 1, 1, 2120, 5, corr(14)),
      ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 7, 1106, 10, corr(10)),
      ev("kernel", "void gemm_kernel<float>(float*)", 0, 7, 1130, 100, corr(11)),
      ev("kernel", "ampere_sgemm_128x64_nt", 0, 7, 1430, 200, corr(12)),
      ev("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0,
         20, 1450, 300,
         corr(13) + ", \"Collective name\": \"allreduce\", \"Process Group Name\": \"0\", "
                    "\"In msg nelems\": 100, \"Out msg nelems\": 100"),
      ev("kernel", "void gemm_kernel<float>(float*)", 0, 7, 2130, 120, corr(14)),
  };
}

const StageTime* stage(const StepSample& s, const std::string& name) { return s.find(name); }

TEST(TraceReader, StagesFromTheAnnotationsAroundEachLaunch) {
  TempDir dir;
  const RankTrace t = read_trace(dir.file("t.json", trace(small_job())));
  EXPECT_EQ(t.info.rank, 3);
  EXPECT_EQ(t.info.world_size, 4);
  EXPECT_FALSE(t.rank_from_file_name);
  EXPECT_TRUE(t.has_device_activity);
  ASSERT_EQ(t.samples.size(), 2u);
  const StepSample& s = t.samples[0];
  EXPECT_EQ(s.step, 5);
  EXPECT_DOUBLE_EQ(s.step_ms, 1.0);
  ASSERT_NE(stage(s, "forward"), nullptr);
  EXPECT_NEAR(stage(s, "forward")->ms, 0.1, 1e-9);  // the kernel, not the annotation
  EXPECT_EQ(stage(s, "forward")->calls, 1u);
  ASSERT_NE(stage(s, "backward"), nullptr);  // launched inside an autograd op
  EXPECT_NEAR(stage(s, "backward")->ms, 0.2, 1e-9);
  ASSERT_NE(stage(s, "communication"), nullptr);
  EXPECT_EQ(stage(s, "communication")->kind, StageKind::communication);
  EXPECT_NEAR(stage(s, "communication")->ms, 0.3, 1e-9);
  ASSERT_NE(stage(s, "h2d"), nullptr);  // an unannotated host-to-device copy
  EXPECT_EQ(stage(s, "h2d")->kind, StageKind::data);
  // The DataLoader has no device work: its host time is the stage.
  ASSERT_NE(stage(s, "dataloader"), nullptr);
  EXPECT_EQ(stage(s, "dataloader")->kind, StageKind::data);
  EXPECT_NEAR(stage(s, "dataloader")->ms, 0.1, 1e-9);
  // Pipeline order: the order the stages began in.
  EXPECT_EQ(s.stages.front().name, "dataloader");
  EXPECT_EQ(t.samples[1].step, 6);
  EXPECT_NEAR(stage(t.samples[1], "forward")->ms, 0.12, 1e-9);
  ASSERT_EQ(t.collectives.size(), 1u);
  EXPECT_EQ(t.collectives[0].name, "allreduce");
  EXPECT_EQ(t.collectives[0].step, 5);
  EXPECT_NEAR(t.collectives[0].ms, 0.3, 1e-9);
}

TEST(TraceReader, TimelineAddsUpToTheWindow) {
  TempDir dir;
  const RankTrace t = read_trace(dir.file("t.json", trace(small_job())));
  ASSERT_EQ(t.timeline.size(), 2u);
  for (const StepTimeline& x : t.timeline) {
    const double sum = x.busy_ms + x.copy_ms + x.data_wait_ms + x.comm_idle_ms + x.launch_wait_ms +
                       x.other_idle_ms;
    EXPECT_NEAR(sum, x.window_ms, 1e-9) << "step " << x.step;
  }
  const StepTimeline& a = t.timeline[0];
  // Step 5: [1000, 2000). Busy: kernels 1130-1230, 1430-1750 (backward and NCCL overlap).
  EXPECT_NEAR(a.busy_ms, 0.1 + 0.32, 1e-9);
  // The copy 1106-1116 runs alone: data; the DataLoader 1000-1100 with nothing running: data.
  EXPECT_NEAR(a.data_wait_ms, 0.1 + 0.01, 1e-9);
  // Idle until the next activity's launch returned: 1100-1105 (the copy), 1116-1125, 1230-1425,
  // and 1750-2000 (step 6's first launch returns at 2125); the rest of the idle time is other.
  EXPECT_NEAR(a.launch_wait_ms, 0.005 + 0.009 + 0.195 + 0.25, 1e-9);
  EXPECT_NEAR(a.other_idle_ms, 0.001 + 0.005 + 0.005, 1e-9);
  EXPECT_NEAR(a.comm_idle_ms, 0.0, 1e-9);  // no host annotation of kind communication
  EXPECT_NEAR(a.comm_ms, 0.3, 1e-9);
  EXPECT_EQ(a.activities, 4u);
  EXPECT_EQ(a.collectives, 1u);
}

TEST(TraceReader, VariantsOfTheFormat) {
  TempDir dir;
  // ts and dur as strings, pid and tid as strings, PyTorch 1.x category names, the rank only in
  // the file name, distributedInfo after traceEvents in another file.
  const std::string legacy = trace(
      {"{\"ph\": \"X\", \"cat\": \"Operator\", \"name\": \"ProfilerStep#0\", \"pid\": \"p\", "
       "\"tid\": \"main\", \"ts\": \"100\", \"dur\": \"1000.5\"}",
       "{\"ph\": \"X\", \"cat\": \"Runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": \"p\", "
       "\"tid\": \"main\", \"ts\": \"110\", \"dur\": \"5\", \"args\": {\"correlation\": 7}}",
       "{\"ph\": \"X\", \"cat\": \"Kernel\", \"name\": \"k\", \"pid\": \"0\", \"tid\": \"stream 7\", "
       "\"ts\": \"120.25\", \"dur\": \"30.125\", \"args\": {\"correlation\": \"7\"}}"},
      "");
  const RankTrace a = read_trace(dir.file("job_rank-12.json", legacy));
  EXPECT_EQ(a.info.rank, 12);
  EXPECT_TRUE(a.rank_from_file_name);
  ASSERT_EQ(a.samples.size(), 1u);
  EXPECT_DOUBLE_EQ(a.samples[0].step_ms, 1.0005);
  ASSERT_NE(stage(a.samples[0], "unannotated"), nullptr);
  EXPECT_NEAR(stage(a.samples[0], "unannotated")->ms, 0.030125, 1e-12);

  std::string late = "{\"traceEvents\": [" + ev("user_annotation", "ProfilerStep#1", 1, 1, 0, 10) +
                     "], \"distributedInfo\": {\"rank\": 2}, \"host_name\": \"node-7\"}";
  const RankTrace b = read_trace(dir.file("x.json", late));
  EXPECT_EQ(b.info.rank, 2);
  EXPECT_EQ(b.info.host, "node-7");
  EXPECT_FALSE(b.has_device_activity);

  // Chrome's JSON array format: the events alone.
  const RankTrace c = read_trace(
      dir.file("rank4.json", "[" + ev("user_annotation", "ProfilerStep#3", 1, 1, 0, 10) + "]"));
  EXPECT_EQ(c.info.rank, 4);
  ASSERT_EQ(c.samples.size(), 1u);
  EXPECT_EQ(c.samples[0].step, 3);
}

TEST(TraceReader, NanosecondsOfAbsoluteTimestampsAreKept) {
  TempDir dir;
  const RankTrace t = read_trace(dir.file(
      "rank-0.json",
      trace({"{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#0\", "
             "\"pid\": 1, \"tid\": 1, \"ts\": 1712195495502094.123, \"dur\": 0.001}"})));
  ASSERT_EQ(t.samples.size(), 1u);
  EXPECT_DOUBLE_EQ(t.samples[0].step_ms, 1e-6);
}

TEST(TraceReader, HostTimesWithoutDeviceActivity) {
  TempDir dir;
  const RankTrace t = read_trace(dir.file(
      "rank-1.json",
      trace({ev("user_annotation", "ProfilerStep#0", 1, 1, 0, 100),
             ev("user_annotation", "DistributedDataParallel.forward", 1, 1, 10, 20),
             ev("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 1, 1, 40, 10),
             ev("cpu_op", "autograd::engine::evaluate_function: TBackward0", 1, 1, 50, 5),
             ev("user_annotation", "gloo:all_reduce", 1, 9, 45, 30),
             ev("user_annotation", "Optimizer.step#SGD.step", 1, 1, 80, 10)})));
  ASSERT_EQ(t.samples.size(), 1u);
  const StepSample& s = t.samples[0];
  EXPECT_NEAR(stage(s, "forward")->ms, 0.02, 1e-12);
  EXPECT_NEAR(stage(s, "backward")->ms, 0.015, 1e-12);
  EXPECT_EQ(stage(s, "backward")->calls, 2u);
  EXPECT_EQ(stage(s, "communication")->kind, StageKind::communication);
  EXPECT_NEAR(stage(s, "communication")->ms, 0.03, 1e-12);
  EXPECT_NEAR(stage(s, "optimizer")->ms, 0.01, 1e-12);
  EXPECT_TRUE(t.timeline.empty());
}

TEST(TraceReader, TheChunkSizeChangesNothing) {
  // Events split across every chunk boundary: a 4 KiB chunk and the default give the same.
  const std::string path = kExamples + "/trace-slow-rank/rank-2.json.gz";
  TraceOptions small;
  small.chunk_bytes = 4096;
  const RankTrace a = read_trace(path);
  const RankTrace b = read_trace(path, small);
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (std::size_t i = 0; i < a.samples.size(); ++i) {
    ASSERT_EQ(a.samples[i].stages.size(), b.samples[i].stages.size());
    for (std::size_t k = 0; k < a.samples[i].stages.size(); ++k) {
      EXPECT_EQ(a.samples[i].stages[k].name, b.samples[i].stages[k].name);
      EXPECT_EQ(a.samples[i].stages[k].ms, b.samples[i].stages[k].ms);
    }
  }
  EXPECT_EQ(a.stats.events, b.stats.events);
  EXPECT_GT(a.stats.json_bytes, a.stats.bytes);  // gzip: more text than bytes on disk
}

TEST(TraceReader, StringsHoldingBracketsAndEscapes) {
  TempDir dir;
  const RankTrace t = read_trace(dir.file(
      "rank-0.json",
      trace({ev("user_annotation", "ProfilerStep#0", 1, 1, 0, 100),
             ev("user_annotation", "odd {[\\\"name\\\"]} \\u00e9", 1, 1, 10, 20),
             ev("user_annotation", "back\\\\", 1, 1, 40, 20)})));
  ASSERT_EQ(t.samples.size(), 1u);
  ASSERT_EQ(t.samples[0].stages.size(), 2u);
  EXPECT_EQ(t.samples[0].stages[0].name, "odd {[\"name\"]} \xc3\xa9");
  EXPECT_EQ(t.samples[0].stages[1].name, "back\\");
  EXPECT_EQ(t.stats.malformed, 0u);
}

TEST(TraceReader, MalformedEventsAreSkippedWithTheirLine) {
  TempDir dir;
  std::vector<std::string> events = {
      ev("user_annotation", "ProfilerStep#0", 1, 1, 0, 100),
      "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"a\", \"ts\": \"soon\", \"dur\": 1}",
      "[1, 2]",
      "{\"ph\": \"X\", \"cat\": tru, \"name\": \"b\"}",
      ev("user_annotation", "bad \xff utf-8", 1, 1, 5, 1),
      ev("user_annotation", "## forward ##", 1, 1, 10, 20)};
  const RankTrace t = read_trace(dir.file("rank-0.json", trace(events)));
  EXPECT_EQ(t.stats.malformed, 4u);
  ASSERT_EQ(t.stats.errors.size(), 4u);
  EXPECT_EQ(t.stats.errors[0].line, 3u);
  EXPECT_EQ(t.stats.errors[0].what, "'ts' is not a number");
  EXPECT_EQ(t.stats.errors[1].line, 4u);
  EXPECT_EQ(t.stats.errors[1].what, "an element of traceEvents that is not an object");
  EXPECT_EQ(t.stats.errors[2].line, 5u);
  EXPECT_EQ(t.stats.errors[2].what, "'cat' is not a string");
  EXPECT_EQ(t.stats.errors[3].line, 6u);
  EXPECT_NE(t.stats.errors[3].what.find("not valid JSON"), std::string::npos);
  ASSERT_EQ(t.samples.size(), 1u);
  EXPECT_NE(stage(t.samples[0], "forward"), nullptr);  // the events after them still count
}

TEST(TraceReader, ACutFileKeepsWhatWasRead) {
  TempDir dir;
  std::string text = trace(small_job());
  text.resize(text.size() - 200);  // cut inside the last events
  const RankTrace t = read_trace(dir.file("rank-0.json", text));
  EXPECT_TRUE(t.stats.truncated);
  ASSERT_FALSE(t.stats.errors.empty());
  EXPECT_NE(t.stats.errors.back().what.find("the file ends inside"), std::string::npos);
  EXPECT_EQ(t.samples.size(), 2u);
}

// gzip (window_bits 15 + 16), or the zlib format (15).
std::string gzip(const std::string& text, int level = 6, int window_bits = 15 + 16) {
  z_stream z{};
  deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(TraceReader, GzipWhateverTheNameAndACutGzipStream) {
  TempDir dir;
  const std::string text = trace(small_job());
  const RankTrace a = read_trace(dir.file("rank-0.json", gzip(text)));  // no .gz in the name
  EXPECT_EQ(a.samples.size(), 2u);
  EXPECT_FALSE(a.stats.truncated);
  std::string cut = gzip(text);
  cut.resize(cut.size() / 2);
  const RankTrace b = read_trace(dir.file("rank-1.json.gz", cut));
  EXPECT_TRUE(b.stats.truncated);
  bool said = false;
  for (const auto& e : b.stats.errors) said = said || e.what.find("gzip") != std::string::npos;
  EXPECT_TRUE(said);
  // Two gzip members one after the other are one file (gzip -c a b > c).
  const std::string half = text.substr(0, text.size() / 2);
  const RankTrace c = read_trace(dir.file("rank-2.json.gz", gzip(half) + gzip(text.substr(half.size()))));
  EXPECT_EQ(c.samples.size(), 2u);
  EXPECT_FALSE(c.stats.truncated);
}

// Each gzip member's text is checked against its trailer (CRC-32 and length) wherever the
// trailer falls among the file's reads (256 KiB each): members of many sizes, a first member whose
// trailer is split between two reads, and a wrong CRC or length named as zlib names them.
bool said_gzip(const RankTrace& t, const std::string& words) {
  for (const auto& e : t.stats.errors)
    if (e.what.find(words) != std::string::npos) return true;
  return false;
}

TEST(TraceReader, EachGzipMemberIsCheckedAgainstItsTrailer) {
  TempDir dir;
  std::uint64_t state = 12345;
  const auto padded = [&](std::size_t n) {
    std::string pad(n, 'a');
    for (char& c : pad) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      c = static_cast<char>('a' + (state >> 33) % 26);
    }
    std::string text = trace(small_job());  // the events, then the padding
    text.insert(text.size() - 1, ", \"pad\": \"" + pad + "\"");
    return text;
  };
  int file = 0;
  for (const std::size_t n : {0u, 1u, 15u, 64u, 1000u, 70000u, 300000u, 1100000u}) {
    for (const int level : {0, 1, 6}) {
      const RankTrace t =
          read_trace(dir.file("m" + std::to_string(file++) + ".json.gz", gzip(padded(n), level)));
      EXPECT_EQ(t.samples.size(), 2u) << n << " " << level;
      EXPECT_TRUE(t.stats.errors.empty()) << n << " " << level << ": " << t.stats.errors[0].what;
    }
  }
  // Stored (level 0), a member grows with its text byte for byte: the first member's text is cut
  // where its trailer's 8 bytes start 3 bytes before the end of the first 256 KiB read.
  const std::string whole = padded(300000);
  std::size_t m = 262144;
  std::string first = gzip(whole.substr(0, m), 0);
  for (int i = 0; i < 4 && first.size() != 262144 + 5; ++i) {
    m += 262144 + 5 - first.size();  // modulo 2^64: smaller when the member came out larger
    first = gzip(whole.substr(0, m), 0);
  }
  ASSERT_EQ(first.size(), 262144u + 5);
  const std::string split = first + gzip(whole.substr(m), 6);
  const RankTrace a = read_trace(dir.file("split.json.gz", split));
  EXPECT_EQ(a.samples.size(), 2u);
  EXPECT_TRUE(a.stats.errors.empty()) << a.stats.errors[0].what;
  // A wrong CRC (the trailer's first 4 bytes) and a wrong length (its last 4), in that member.
  std::string bad_crc = split, bad_length = split;
  bad_crc[262144 + 5 - 8] ^= 1;
  bad_length[262144 + 5 - 1] ^= 1;
  EXPECT_TRUE(said_gzip(read_trace(dir.file("crc.json.gz", bad_crc)),
                        "the gzip stream is broken (incorrect data check)"));
  EXPECT_TRUE(said_gzip(read_trace(dir.file("length.json.gz", bad_length)),
                        "the gzip stream is broken (incorrect length check)"));
  // After a gzip member, a member in the zlib format (Adler-32, big-endian, in its trailer).
  const std::string mixed = gzip(whole.substr(0, 1000)) + gzip(whole.substr(1000), 6, 15);
  const RankTrace b = read_trace(dir.file("mixed.json.gz", mixed));
  EXPECT_EQ(b.samples.size(), 2u);
  EXPECT_TRUE(b.stats.errors.empty()) << b.stats.errors[0].what;
  std::string bad_adler = mixed;
  bad_adler.back() ^= 1;
  EXPECT_TRUE(said_gzip(read_trace(dir.file("adler.json.gz", bad_adler)),
                        "the gzip stream is broken (incorrect data check)"));
  // The same in a one-member file whose trailer lies inside one read.
  std::string small = gzip(padded(100), 6);
  small[small.size() - 6] ^= 0x40;
  EXPECT_TRUE(said_gzip(read_trace(dir.file("crc-small.json.gz", small)),
                        "the gzip stream is broken (incorrect data check)"));
}

TEST(TraceReader, AStrayBraceAmongTheEventsIsSkippedNotReadForever) {
  // A '}' or ':' where an event should start ends a scalar before it starts: the reader once
  // read that same element again and again (found by trace_dir_fuzzer on a damaged trace).
  TempDir dir;
  std::string text = trace(small_job());
  const std::size_t at = text.find("[") + 1;
  text.insert(at, " } : , ");
  const RankTrace t = read_trace(dir.file("rank-0.json", text));
  EXPECT_EQ(t.samples.size(), 2u);
  EXPECT_EQ(t.stats.malformed, 2u);
}

TEST(TraceReader, RefusesWhatIsNotATraceOfARank) {
  TempDir dir;
  EXPECT_THROW(read_trace(dir.path() + "/missing.json"), InputError);
  try {
    read_trace(dir.file("rank-0.json", trace({ev("cpu_op", "aten::mm", 1, 1, 0, 1)})));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no ProfilerStep#N annotation"), std::string::npos);
  }
  try {
    read_trace(dir.file("trace.json",
                        trace({ev("user_annotation", "ProfilerStep#0", 1, 1, 0, 1)}, "")));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no rank"), std::string::npos);
  }
  try {
    read_trace(dir.file("rank-9.json", "{\"schemaVersion\": 1}"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no traceEvents"), std::string::npos);
  }
  EXPECT_THROW(read_trace(dir.file("rank-8.json", "hello")), InputError);
}

TEST(TraceRunReader, WindowsInStepOrderAndOneTracePerRank) {
  TraceRunReader reader(kExamples + "/trace-slow-rank");
  EXPECT_EQ(reader.files().size(), 4u);
  Window w;
  std::int64_t last = -1;
  std::size_t windows = 0;
  while (reader.next(w)) {
    EXPECT_GT(w.step, last);
    last = w.step;
    EXPECT_EQ(w.samples.size(), 4u);
    ++windows;
  }
  EXPECT_EQ(windows, 10u);
  EXPECT_EQ(reader.stats().files, 4u);
  EXPECT_EQ(reader.bytes_read(), reader.bytes_total());
  ASSERT_EQ(reader.ranks().size(), 4u);
  EXPECT_EQ(reader.ranks()[2].info.rank, 2);

  TempDir dir;
  const std::string one = trace({ev("user_annotation", "ProfilerStep#0", 1, 1, 0, 1)});
  dir.file("a.json", one);
  dir.file("b.json", one);
  TraceRunReader twice(dir.path());
  try {
    twice.load();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("both hold rank 3"), std::string::npos);
  }
}

// A gzip bomb: a small file that inflates to a flood of kernel events. The records kept of one
// file are capped (TraceOptions::max_records): past it the file is refused, naming it, instead of
// memory growing with the inflated text (a 14.6 MB file of 4 GB of kernels took 4.56 GB).
TEST(TraceReader, AGzipBombIsRefusedAtTheRecordCapNamingTheFile) {
  TempDir dir;
  std::string text = "{\"distributedInfo\": {\"rank\": 0}, \"traceEvents\": [\n" +
                     ev("user_annotation", "ProfilerStep#1", 1, 1, 0, 1e6);
  const std::string kernel = ",\n" + ev("kernel", "k", 0, 7, 10, 1, corr(1));
  for (int i = 0; i < 40000; ++i) text += kernel;
  text += "\n]}";
  const std::string bomb = gzip(text);
  EXPECT_LT(bomb.size() * 50, text.size());  // the ratio of a bomb
  const std::string path = dir.file("rank-0.json.gz", bomb);
  TraceOptions capped;
  capped.max_records = 10000;
  try {
    read_trace(path, capped);
    FAIL() << "read past the cap";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank-0.json.gz: more than 10000 kernels, launch calls and annotations"),
              std::string::npos)
        << what;
  }
  // Under the cap, the same file reads (the cap counts records, not bytes of text).
  capped.max_records = 50000;
  EXPECT_EQ(read_trace(path, capped).samples.size(), 1u);
  // And the directory reader refuses the run (exit 2), naming the file.
  TraceOptions dir_capped;
  dir_capped.max_records = 10000;
  TraceRunReader reader(dir.path(), dir_capped);
  EXPECT_THROW(reader.load(), InputError);
  EXPECT_GT(TraceOptions{}.max_records, 0u);
}

// A rank's trace whose gzip stream is broken from its first bytes was passed over as "not a
// trace": the run was analysed without that rank, the file named nowhere. It is now read, and
// refused with the file and the reason, as a *.pt.trace.json.gz is.
TEST(TraceRunReader, ADamagedCompressedTraceIsNamedNotPassedOver) {
  TempDir dir;
  const std::string one = trace({ev("user_annotation", "ProfilerStep#0", 1, 1, 0, 1)},
                                "\"distributedInfo\": {\"rank\": 0, \"world_size\": 2}, ");
  dir.file("rank-0.json.gz", gzip(one));
  std::string damaged = gzip(one);
  for (std::size_t i = 10; i < damaged.size() && i < 40; ++i) damaged[i] = '\xff';
  dir.file("rank-1.json.gz", damaged);
  const std::vector<std::string> found = find_trace_files(dir.path());
  ASSERT_EQ(found.size(), 2u);
  TraceRunReader reader(dir.path());
  try {
    reader.load();
    FAIL() << "a damaged trace was read without a word";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank-1.json.gz"), std::string::npos) << what;
    EXPECT_NE(what.find("gzip stream is broken"), std::string::npos) << what;
  }
  // A .json.gz that is not gzip at all is damaged too; a plain JSON file that is not a trace is
  // still passed over.
  TempDir other;
  other.file("rank-0.json.gz", gzip(one));
  other.file("rank-1.json.gz", "\x01\x02garbage");
  other.file("config.json", "{\"lr\": 0.1}");
  EXPECT_EQ(find_trace_files(other.path()).size(), 2u);
}

TEST(RunSource, DetectsTheFormat) {
  EXPECT_EQ(detect_run_format(kExamples + "/run-healthy"), RunFormat::sample_logs);
  EXPECT_EQ(detect_run_format(kExamples + "/trace-slow-rank"), RunFormat::profiler_traces);
  TempDir dir;
  dir.file("config.json", "{\"lr\": 0.1}");  // JSON, but no trace
  try {
    detect_run_format(dir.path());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no rank-*.jsonl files in"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("no profiler traces either"), std::string::npos);
  }
  const auto src = open_run(kData + "/trace-cpu-gloo");
  Window w;
  ASSERT_TRUE(src->next(w));
  EXPECT_EQ(src->format(), RunFormat::profiler_traces);
  ASSERT_NE(src->traces(), nullptr);
  EXPECT_EQ(src->traces()->size(), 3u);
}

}  // namespace
}  // namespace laggard
