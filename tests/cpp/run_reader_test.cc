// Tests for RunReader (src/io/run_reader.cc): merging RUN_DIR/rank-*.jsonl into per-step windows.
#include <gtest/gtest.h>

#include "temp_dir.hpp"
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "laggard/jsonl.hpp"

namespace laggard {
namespace {

namespace fs = std::filesystem;

// A fresh directory per use (tests/cpp/temp_dir.hpp).
struct TempDir : laggard::testing::TempDir {
  TempDir() : laggard::testing::TempDir("laggard-run-test") {}
};

// step_ms encodes (rank, step) so a test can tell which copy of a sample it got.
StepSample sample(int rank, std::int64_t step, double extra_ms = 0.0) {
  StepSample s;
  s.rank = rank;
  s.world_size = 16;
  s.step = step;
  s.host = "node-" + std::to_string(rank / 8);
  s.step_ms = 100.0 + rank + static_cast<double>(step) / 1000.0 + extra_ms;
  s.stages = {{"forward", StageKind::compute, 10.0 + rank, 1},
              {"allreduce", StageKind::communication, 5.0, 1}};
  return s;
}

std::string lines(const std::vector<StepSample>& samples) {
  std::string out;
  for (const auto& s : samples) append_sample_json(s, out);
  return out;
}

// (step, ranks in the window) for every window.
std::vector<std::pair<std::int64_t, std::vector<int>>> read_windows(RunReader& reader) {
  std::vector<std::pair<std::int64_t, std::vector<int>>> result;
  Window w;
  while (reader.next(w)) {
    std::vector<int> ranks;
    for (const auto& s : w.samples) {
      EXPECT_EQ(s.step, w.step);
      ranks.push_back(s.rank);
    }
    result.emplace_back(w.step, ranks);
  }
  return result;
}

using Windows = std::vector<std::pair<std::int64_t, std::vector<int>>>;

TEST(RunReader, MergesFilesWithDifferentStepsIntoWindows) {
  TempDir dir;
  dir.file("rank-0.jsonl", lines({sample(0, 0), sample(0, 10), sample(0, 20), sample(0, 30)}));
  dir.file("rank-1.jsonl", lines({sample(1, 10), sample(1, 20), sample(1, 40)}));
  dir.file("rank-2.jsonl", lines({sample(2, 0), sample(2, 20), sample(2, 30), sample(2, 40)}));
  RunReader reader(dir.path());
  EXPECT_EQ(reader.stats().files, 3u);

  Window w;
  ASSERT_TRUE(reader.next(w));
  EXPECT_EQ(w.step, 0);
  ASSERT_EQ(w.samples.size(), 2u);
  EXPECT_EQ(w.samples[0].rank, 0);
  EXPECT_EQ(w.samples[1].rank, 2);
  EXPECT_EQ(w.samples[1].step_ms, sample(2, 0).step_ms);
  EXPECT_EQ(w.samples[1].host, "node-0");
  ASSERT_EQ(w.samples[1].stages.size(), 2u);
  EXPECT_EQ(w.samples[1].stages[0].ms, 12.0);

  EXPECT_EQ(read_windows(reader),
            (Windows{{10, {0, 1}}, {20, {0, 1, 2}}, {30, {0, 2}}, {40, {1, 2}}}));
  EXPECT_FALSE(reader.next(w));
  EXPECT_TRUE(w.samples.empty());

  const RunStats& st = reader.stats();
  EXPECT_EQ(st.samples, 11u);
  EXPECT_EQ(st.windows, 5u);
  EXPECT_EQ(st.malformed, 0u);
  EXPECT_EQ(st.duplicates, 0u);
  EXPECT_EQ(st.out_of_order, 0u);
  EXPECT_GT(reader.bytes_total(), 0u);
  EXPECT_EQ(reader.bytes_read(), reader.bytes_total());
  EXPECT_EQ(st.bytes, reader.bytes_total());
}

TEST(RunReader, OrdersFilesNumericallyAndIgnoresOtherNames) {
  TempDir dir;
  for (int r : {10, 2, 1, 0})
    dir.file("rank-" + std::to_string(r) + ".jsonl", lines({sample(r, 5)}));
  dir.file("notes.txt", "not a rank file\n");
  dir.file("rank-x.jsonl", "garbage\n");
  dir.file("rank-3.jsonl.bak", "garbage\n");
  dir.file("rank-.jsonl", "garbage\n");
  RunReader reader(dir.path());
  std::vector<std::string> names;
  for (const auto& f : reader.files()) names.push_back(fs::path(f).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"rank-0.jsonl", "rank-1.jsonl", "rank-2.jsonl",
                                             "rank-10.jsonl"}));
  EXPECT_EQ(read_windows(reader), (Windows{{5, {0, 1, 2, 10}}}));
  EXPECT_EQ(reader.stats().malformed, 0u);
}

TEST(RunReader, SortsSamplesByRankEvenWhenFilesDisagreeWithTheirNames) {
  TempDir dir;
  // rank-0.jsonl holds rank 7's samples and rank-1.jsonl rank 3's.
  dir.file("rank-0.jsonl", lines({sample(7, 1), sample(7, 2)}));
  dir.file("rank-1.jsonl", lines({sample(3, 1), sample(3, 2)}));
  RunReader reader(dir.path());
  EXPECT_EQ(read_windows(reader), (Windows{{1, {3, 7}}, {2, {3, 7}}}));
}

TEST(RunReader, KeepsTheFirstOfDuplicateSamples) {
  TempDir dir;
  // The same (rank 0, step 10) in two files: rank-0.jsonl's copy is first.
  dir.file("rank-0.jsonl", lines({sample(0, 10), sample(0, 20)}));
  dir.file("rank-1.jsonl", lines({sample(1, 10), sample(0, 20, 0.5), sample(1, 30)}));
  // A line repeated within one file.
  dir.file("rank-2.jsonl",
            lines({sample(2, 10), sample(2, 20), sample(2, 20, 0.5), sample(2, 30)}));
  RunReader reader(dir.path());
  Window w;
  ASSERT_TRUE(reader.next(w));
  EXPECT_EQ(w.step, 10);
  ASSERT_TRUE(reader.next(w));
  EXPECT_EQ(w.step, 20);
  ASSERT_EQ(w.samples.size(), 2u);
  EXPECT_EQ(w.samples[0].rank, 0);
  EXPECT_EQ(w.samples[0].step_ms, sample(0, 20).step_ms);  // not the +0.5 copy
  EXPECT_EQ(w.samples[1].rank, 2);
  EXPECT_EQ(w.samples[1].step_ms, sample(2, 20).step_ms);
  EXPECT_EQ(read_windows(reader), (Windows{{30, {1, 2}}}));
  EXPECT_EQ(reader.stats().duplicates, 2u);
  EXPECT_EQ(reader.stats().out_of_order, 0u);
  EXPECT_EQ(reader.stats().samples, 7u);
}

TEST(RunReader, SkipsStepsThatGoBackwardsWithinAFile) {
  TempDir dir;
  dir.file("rank-0.jsonl",
            lines({sample(0, 10), sample(0, 20), sample(0, 15), sample(0, 5), sample(0, 30)}));
  dir.file("rank-1.jsonl", lines({sample(1, 15), sample(1, 30)}));
  RunReader reader(dir.path());
  EXPECT_EQ(read_windows(reader), (Windows{{10, {0}}, {15, {1}}, {20, {0}}, {30, {0, 1}}}));
  EXPECT_EQ(reader.stats().out_of_order, 2u);
  EXPECT_EQ(reader.stats().duplicates, 0u);
}

TEST(RunReader, CountsMalformedLinesWithFileAndLine) {
  TempDir dir;
  dir.file("rank-0.jsonl", lines({sample(0, 1), sample(0, 2), sample(0, 3)}));
  std::string bad = lines({sample(1, 1), sample(1, 2)});
  bad += "this is not json\n";
  bad += lines({sample(1, 3)});
  bad +=
      R"({"schema":"laggard.sample/1","rank":1,"world_size":16,"step":4,"step_ms":-3,"stages":[]})";
  bad += "\n";
  const std::string bad_path = dir.file("rank-1.jsonl", bad);
  dir.file("rank-2.jsonl", "");  // an empty rank file contributes nothing, and is no error
  RunReader reader(dir.path());
  EXPECT_EQ(read_windows(reader), (Windows{{1, {0, 1}}, {2, {0, 1}}, {3, {0, 1}}}));
  const RunStats& st = reader.stats();
  EXPECT_EQ(st.files, 3u);
  EXPECT_EQ(st.malformed, 2u);
  ASSERT_EQ(st.errors.size(), 2u);
  EXPECT_EQ(st.errors[0].message().rfind(bad_path + ":3: not a JSON object", 0), 0u)
      << st.errors[0].message();
  EXPECT_EQ(st.errors[1].message().rfind(bad_path + ":5: field 'step_ms' is negative", 0), 0u)
      << st.errors[1].message();
  EXPECT_EQ(reader.bytes_read(), reader.bytes_total());
}

TEST(RunReader, KeepsTheFirst20ErrorsOfAllFiles) {
  TempDir dir;
  for (int r = 0; r < 3; ++r) {
    std::string content = lines({sample(r, 1)});
    for (int i = 0; i < 10; ++i) content += "{oops\n";
    dir.file("rank-" + std::to_string(r) + ".jsonl", content);
  }
  RunReader reader(dir.path());
  EXPECT_EQ(read_windows(reader), (Windows{{1, {0, 1, 2}}}));
  EXPECT_EQ(reader.stats().malformed, 30u);
  EXPECT_EQ(reader.stats().errors.size(), 20u);
}

TEST(RunReader, YieldsNothingForEmptyRankFiles) {
  TempDir dir;
  dir.file("rank-0.jsonl", "");
  dir.file("rank-1.jsonl", "\n\n");
  RunReader reader(dir.path());
  Window w;
  EXPECT_FALSE(reader.next(w));
  EXPECT_EQ(reader.stats().windows, 0u);
  EXPECT_EQ(reader.stats().malformed, 0u);
}

TEST(RunReader, ReusesTheWindowAcrossCallsOfDifferentSizes) {
  TempDir dir;
  std::vector<StepSample> rank0, rank1;
  for (int step = 0; step < 1000; ++step) {
    rank0.push_back(sample(0, step));
    if (step % 3 == 0) rank1.push_back(sample(1, step));
  }
  dir.file("rank-0.jsonl", lines(rank0));
  dir.file("rank-1.jsonl", lines(rank1));
  RunReader reader(dir.path());
  Window w;
  std::int64_t expected_step = 0;
  while (reader.next(w)) {
    ASSERT_EQ(w.step, expected_step);
    ASSERT_EQ(w.samples.size(), expected_step % 3 == 0 ? 2u : 1u);
    EXPECT_EQ(w.samples.back().step_ms, sample(w.samples.back().rank, w.step).step_ms);
    ++expected_step;
  }
  EXPECT_EQ(expected_step, 1000);
  EXPECT_EQ(reader.stats().samples, 1334u);
}

// Everything a reader yields, for comparing readers: per window the step and every sample in
// full; then the statistics, errors in order.
std::string everything(RunReader& reader) {
  std::string out;
  Window w;
  while (reader.next(w)) {
    out += "window " + std::to_string(w.step) + "\n";
    for (const auto& s : w.samples) append_sample_json(s, out);
  }
  const RunStats& st = reader.stats();
  out += "files " + std::to_string(st.files) + " samples " + std::to_string(st.samples) +
         " malformed " + std::to_string(st.malformed) + " duplicates " +
         std::to_string(st.duplicates) + " out_of_order " + std::to_string(st.out_of_order) +
         " windows " + std::to_string(st.windows) + " bytes " + std::to_string(st.bytes) +
         " conflicts " + std::to_string(st.world_size_conflicts) + " " + st.world_size_conflict +
         "\n";
  for (const auto& e : st.errors) out += e.message() + "\n";
  return out;
}

TEST(RunReader, YieldsTheSameWhateverTheNumberOfWorkers) {
  // A run with everything a merge meets: files of different lengths and step sets, an empty
  // one, malformed lines in several files (more than the 20 kept: which ones are kept depends on
  // the order they are met in), duplicates within and across files, steps going backwards, a
  // file disagreeing on world_size, blank lines.
  TempDir dir;
  for (int r = 0; r < 11; ++r) {
    std::string content;
    for (int step = 0; step < 200; ++step) {
      if ((step + r) % 7 == 0) continue;  // each file misses some steps
      if (r == 4 && step > 50) break;     // a short file
      StepSample s = sample(r, step);
      if (r == 6) s.world_size = 32;
      append_sample_json(s, content);
      if (step % 37 == r) content += "{\"broken\": \n";
      if (step % 53 == r) append_sample_json(sample(r, step, 0.25), content);      // duplicate
      if (step % 61 == r) append_sample_json(sample(r, step - 5, 0.5), content);   // backwards
      if (r == 2 && step % 29 == 0) append_sample_json(sample(3, step, 0.75), content);  // rank 3
      if (step % 41 == 0) content += "\n";
    }
    dir.file("rank-" + std::to_string(r) + ".jsonl", content);
  }
  dir.file("rank-11.jsonl", "");

  RunReader one(dir.path(), RunReaderOptions{0});
  EXPECT_EQ(one.workers(), 0u);
  const std::string expected = everything(one);
  ASSERT_GT(one.stats().malformed, 20u);
  ASSERT_GT(one.stats().duplicates, 0u);
  ASSERT_GT(one.stats().out_of_order, 0u);
  ASSERT_GT(one.stats().world_size_conflicts, 0u);
  for (unsigned workers : {1u, 2u, 3u, 5u, 12u, 64u}) {
    RunReader reader(dir.path(), RunReaderOptions{workers});
    EXPECT_EQ(reader.workers(), std::min(workers, 12u));
    EXPECT_EQ(everything(reader), expected) << workers << " workers";
  }
  RunReader chosen(dir.path());
  EXPECT_EQ(everything(chosen), expected) << "workers chosen: " << chosen.workers();
}

TEST(RunReader, MergesFilesThatGoInAndOutOfStepAsAMergeByStepDoes) {
  // Files that hold the same steps for a while (the merge then takes every file's head without a
  // heap), then each misses steps of its own, then agree again, one ending early, one going
  // backwards, one repeating a step; against windows built here from each file's samples.
  TempDir dir;
  constexpr int kFiles = 6;
  std::vector<std::vector<StepSample>> kept(kFiles);  // what the merge takes from each file
  for (int r = 0; r < kFiles; ++r) {
    std::string content;
    std::int64_t last = -1;
    const auto put = [&](std::int64_t step, double extra) {
      append_sample_json(sample(r, step, extra), content);
      if (step > last) {
        kept[r].push_back(sample(r, step, extra));
        last = step;
      }
    };
    for (std::int64_t step = 0; step < 300; ++step) {
      if (r == 5 && step >= 220) break;                                    // ends early
      if (step >= 100 && step < 200 && (step * (r + 3)) % (r + 2) == 0) continue;  // apart
      if (step >= 250 && step < 260 && r == 3) continue;                  // apart once more
      put(step, 0.0);
      if (r == 2 && step == 40) put(step, 0.25);       // the same step again: skipped
      if (r == 0 && step == 230) put(step - 20, 0.5);  // backwards: skipped
    }
    dir.file("rank-" + std::to_string(r) + ".jsonl", content);
  }
  std::map<std::int64_t, std::vector<const StepSample*>> by_step;
  for (int r = 0; r < kFiles; ++r)
    for (const StepSample& s : kept[r]) by_step[s.step].push_back(&s);
  std::string expected;
  for (const auto& [step, samples] : by_step) {
    expected += "window " + std::to_string(step) + "\n";
    for (const StepSample* s : samples) append_sample_json(*s, expected);
  }
  for (unsigned workers : {0u, 1u, 2u, 4u}) {
    RunReader reader(dir.path(), RunReaderOptions{workers});
    std::string got;
    Window w;
    while (reader.next(w)) {
      got += "window " + std::to_string(w.step) + "\n";
      for (const auto& s : w.samples) append_sample_json(s, got);
    }
    EXPECT_EQ(got, expected) << workers << " workers";
    EXPECT_EQ(reader.stats().duplicates, 1u);
    EXPECT_EQ(reader.stats().out_of_order, 1u);
    EXPECT_EQ(reader.stats().windows, by_step.size());
  }
}

TEST(RunReader, StopsItsWorkersWhenDestroyedEarly) {
  TempDir dir;
  for (int r = 0; r < 4; ++r) {
    std::vector<StepSample> v;
    for (int step = 0; step < 2000; ++step) v.push_back(sample(r, step));
    dir.file("rank-" + std::to_string(r) + ".jsonl", lines(v));
  }
  for (int round = 0; round < 20; ++round) {
    RunReader reader(dir.path(), RunReaderOptions{3});
    Window w;
    for (int i = 0; i < round; ++i) ASSERT_TRUE(reader.next(w));
    EXPECT_EQ(reader.workers(), 3u);
  }  // each reader's workers, blocked on a full queue or not started, are stopped and joined
}

TEST(RunReader, ReportsAReadErrorAsTheSingleThreadedReaderDoes) {
  TempDir dir;
  dir.file("rank-0.jsonl", lines({sample(0, 1), sample(0, 2)}));
  dir.file("rank-1.jsonl", lines({sample(1, 1), sample(1, 2)}));
  // A regular file whose read() fails (EIO at offset 0): the failure is met while reading, in
  // a worker when there are workers, and must reach the caller of next() all the same.
  fs::create_symlink("/proc/self/mem", dir.path() + "/rank-2.jsonl");
  for (unsigned workers : {0u, 1u, 2u}) {
    RunReader reader(dir.path(), RunReaderOptions{workers});
    Window w;
    try {
      while (reader.next(w)) {
      }
      FAIL() << "no error with " << workers << " workers";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot read " + dir.path() + "/rank-2.jsonl"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(RunReader, ThrowsForAMissingDirectory) {
  TempDir dir;
  const std::string missing = dir.path() + "/nope";
  try {
    RunReader reader(missing);
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "run directory " + missing + " does not exist");
  }
}

TEST(RunReader, ThrowsForAFileInsteadOfADirectory) {
  TempDir dir;
  const std::string file = dir.file("rank-0.jsonl", lines({sample(0, 1)}));
  try {
    RunReader reader(file);
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), file + " is not a directory");
  }
}

TEST(RunReader, ThrowsForADirectoryWithoutRankFiles) {
  TempDir dir;
  dir.file("rank0.jsonl", lines({sample(0, 1)}));  // wrong name
  try {
    RunReader reader(dir.path());
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "no rank-*.jsonl files in " + dir.path());
  }
}

TEST(RunReader, NamesARankFileWhoseRankIsNotANumber) {
  TempDir dir;
  dir.file("rank-abc.jsonl", lines({sample(0, 1)}));
  try {
    RunReader reader(dir.path());
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "no rank-*.jsonl files in " + dir.path() +
                  " (rank-abc.jsonl does not name a rank: expected rank-<N>.jsonl with N in "
                  "decimal digits)");
  }
}

// A rank file that is not a readable regular file stops the run with a message naming it, as an
// unreadable file does (they used to be skipped without a word).
TEST(RunReader, RefusesRankFilesThatAreNotRegularFiles) {
  const auto expect_refused = [](const std::string& dir, const std::string& name,
                                 const std::string& why) {
    try {
      RunReader reader(dir);
      ADD_FAILURE() << name << ": no exception";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("cannot read " + (fs::path(dir) / name).string()), std::string::npos)
          << what;
      EXPECT_NE(what.find(why), std::string::npos) << what;
    }
  };
  {
    TempDir dir;
    dir.file("rank-0.jsonl", lines({sample(0, 1)}));
    fs::create_directory(fs::path(dir.path()) / "rank-1.jsonl");
    expect_refused(dir.path(), "rank-1.jsonl", "it is a directory");
  }
  {
    TempDir dir;
    dir.file("rank-0.jsonl", lines({sample(0, 1)}));
    fs::create_symlink("nowhere.jsonl", fs::path(dir.path()) / "rank-1.jsonl");
    expect_refused(dir.path(), "rank-1.jsonl", "No such file or directory");
  }
  {
    TempDir dir;
    dir.file("rank-0.jsonl", lines({sample(0, 1)}));
    fs::create_symlink("rank-1.jsonl", fs::path(dir.path()) / "rank-1.jsonl");  // a loop
    expect_refused(dir.path(), "rank-1.jsonl", "symbolic links");
  }
  {
    TempDir dir;
    dir.file("rank-0.jsonl", lines({sample(0, 1)}));
    const std::string fifo = (fs::path(dir.path()) / "rank-1.jsonl").string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    expect_refused(dir.path(), "rank-1.jsonl", "it is a FIFO");  // and does not hang
    SampleFileReader* never = nullptr;
    try {
      never = new SampleFileReader(fifo);
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("FIFO"), std::string::npos) << e.what();
    }
    EXPECT_EQ(never, nullptr);
    delete never;
  }
}

TEST(RunReader, CountsSamplesThatDisagreeOnWorldSize) {
  TempDir dir;
  StepSample other = sample(1, 5);
  other.world_size = 8;
  dir.file("rank-0.jsonl", lines({sample(0, 5), sample(0, 6)}));
  dir.file("rank-1.jsonl", lines({other}));
  RunReader reader(dir.path());
  read_windows(reader);
  EXPECT_EQ(reader.stats().world_size_conflicts, 1u);
  EXPECT_EQ(reader.stats().world_size_conflict,
            "files disagree on world_size: rank 1 says 8 at step 5, rank 0 said 16");
}

// Writes `files` one-line rank files.
void write_rank_files(const TempDir& dir, int files) {
  for (int r = 0; r < files; ++r)
    dir.file("rank-" + std::to_string(r) + ".jsonl", lines({sample(r % 16, 1)}));
}

TEST(RunReader, RaisesTheSoftOpenFileLimitWhenTheRunNeedsIt) {
  TempDir dir;
  write_rank_files(dir, 100);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 200) GTEST_SKIP() << "hard limit too low";
  rlimit low = saved;
  low.rlim_cur = 120;  // fewer than 100 files + 64 spare
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  {
    RunReader reader(dir.path());
    rlimit now{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
    EXPECT_GE(now.rlim_cur, 164u);
    Window w;
    ASSERT_TRUE(reader.next(w));
    EXPECT_EQ(reader.stats().duplicates, 100u - 16u);  // ranks repeat every 16 files
  }
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

// Runs in a child process (a death test): lowering the hard limit cannot be undone without
// privileges. Exits 0 if RunReader refuses with a message that explains the limit.
[[noreturn]] void open_run_under_a_hard_limit_of_80(const std::string& dir) {
  rlimit low{};
  low.rlim_cur = low.rlim_max = 80;
  if (::setrlimit(RLIMIT_NOFILE, &low) != 0) std::_Exit(2);
  try {
    RunReader reader(dir);
  } catch (const InputError& e) {
    const std::string what = e.what();
    const bool ok = what.find("100 rank files") != std::string::npos &&
                    what.find("the limit is 80") != std::string::npos &&
                    what.find("ulimit -n 164") != std::string::npos;
    std::_Exit(ok ? 0 : 3);
  }
  std::_Exit(4);
}

TEST(RunReaderDeathTest, ExplainsAnOpenFileLimitItCannotRaise) {
  TempDir dir;
  write_rank_files(dir, 100);
  EXPECT_EXIT(open_run_under_a_hard_limit_of_80(dir.path()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace laggard
