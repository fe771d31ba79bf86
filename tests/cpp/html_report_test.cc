#include "laggard/html_report.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace laggard {
namespace {

TEST(HtmlEscape, EscapesMarkupQuotesAndControls) {
  EXPECT_EQ(html_escape("<script>alert(\"x\")</script>"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;");
  EXPECT_EQ(html_escape("o'brien & co"), "o&#39;brien &amp; co");
  EXPECT_EQ(html_escape(std::string("a\x01"
                                    "b")),
            "a&#xfffd;b");
  EXPECT_EQ(html_escape("plain node-1"), "plain node-1");
}

TEST(StreamingMedian, ExactForFewValuesCloseForMany) {
  StreamingMedian m;
  EXPECT_TRUE(std::isnan(m.value()));
  m.add(3);
  m.add(1);
  EXPECT_EQ(m.value(), 2.0);
  m.add(2);
  EXPECT_EQ(m.value(), 2.0);
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> d(0.0, 0.3);
  StreamingMedian big;
  std::vector<double> all;
  for (int i = 0; i < 5000; ++i) {
    const double x = d(rng);
    big.add(x);
    all.push_back(x);
  }
  std::nth_element(all.begin(), all.begin() + 2500, all.end());
  EXPECT_NEAR(big.value(), all[2500], 0.02);
  EXPECT_EQ(big.count(), 5000);
}

Window window(std::int64_t step, const std::vector<double>& forward, const std::string& host1) {
  Window w;
  w.step = step;
  double slowest = 0;
  for (double f : forward) slowest = std::max(slowest, f);
  for (std::size_t r = 0; r < forward.size(); ++r) {
    StepSample s;
    s.rank = static_cast<int>(r);
    s.world_size = static_cast<int>(forward.size());
    s.step = step;
    s.host = r == 1 ? host1 : "node-" + std::to_string(r);
    s.cohort = "dp";
    const double comm = 5 + slowest - forward[r];
    s.stages = {{"forward", StageKind::compute, forward[r], 1},
                {"communication", StageKind::communication, comm, 1}};
    s.step_ms = forward[r] + comm;
    w.samples.push_back(s);
  }
  return w;
}

TEST(RunReportData, HeatmapCellsAndBoundedStepTime) {
  RunAnalysis analysis(DetectorOptions::rfc());  // the figures below are the RFC rule's
  RunReportData data(32);
  for (int i = 0; i < 200; ++i) {
    const Window w = window(10 * i, {60, i >= 50 ? 90.0 : 60.0, 60, 60}, "h<1>");
    data.add(w, analysis.add(w));
  }
  ASSERT_EQ(data.stages().size(), 2u);
  EXPECT_EQ(data.stages()[0].name, "forward");
  EXPECT_EQ(data.stages()[1].kind, StageKind::communication);
  EXPECT_EQ(data.cells().size(), 8u);
  for (const auto& c : data.cells()) {
    if (c.rank == 1 && c.stage == 0) {
      EXPECT_NEAR(c.slowdown.value(), 90.0 / 67.5, 0.03);  // P² estimate of the median of t / ref
      EXPECT_GE(c.flagged, 140);
    }
  }
  EXPECT_LE(data.points().size(), 32u);
  int windows = 0;
  for (const auto& p : data.points()) windows += p.windows;
  EXPECT_EQ(windows, 200);
  EXPECT_EQ(data.points().front().first_step, 0);
  EXPECT_EQ(data.points().back().last_step, 1990);
  EXPECT_EQ(data.host_of(1), "h<1>");
  EXPECT_EQ(data.host_of(99), "");
}

TEST(RunReport, SelfContainedEscapedAndComplete) {
  RunAnalysis analysis(DetectorOptions::rfc());  // the figures below are the RFC rule's
  RunReportData data;
  for (int i = 0; i < 30; ++i) {
    const Window w =
        window(10 * i, {60, i >= 10 ? 90.0 : 60.0, 60, 60}, "<script>alert(1)</script>");
    data.add(w, analysis.add(w));
  }
  RunStats stats;
  stats.files = 4;
  stats.malformed = 1;
  stats.errors.push_back({"rank-0.jsonl", 3, "not JSON: <b>"});
  const std::string html = render_run_report(analysis.summary(), data, {"run<dir>", {}, stats, std::nullopt});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script>alert(1)"), std::string::npos);  // escaped
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("run&lt;dir&gt;"), std::string::npos);
  EXPECT_NE(html.find("not JSON: &lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);  // nothing loaded from the network
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  EXPECT_NE(html.find("Content-Security-Policy"), std::string::npos);
  EXPECT_NE(html.find("id=\"stragglers\""), std::string::npos);
  EXPECT_NE(html.find("class=\"heatmap\""), std::string::npos);
  EXPECT_NE(html.find("job slower since step 100"), std::string::npos);
  EXPECT_NE(html.find("data-ready"), std::string::npos);
}

TEST(RunReport, TheTriageChainComesFirstWithTheLayerToLookAt) {
  RunDiagnosis diagnosis;
  RunReportData data;
  for (int i = 0; i < 30; ++i) {
    Window w = window(10 * i, {60, i >= 10 ? 90.0 : 60.0, 60, 60}, "node-1");
    for (StepSample& s : w.samples)
      s.values.push_back({"<loss>", s.rank == 3 && i == 20 ? std::nan("") : 2.0});
    data.add(w, diagnosis.add(w));
  }
  RunReportInput input{"run", {}, {}, diagnosis.finish()};
  const std::string html = render_run_report(diagnosis.analysis().summary(), data, input);
  const std::size_t triage = html.find("id=\"triage\"");
  ASSERT_NE(triage, std::string::npos);
  EXPECT_LT(triage, html.find("id=\"stragglers\""));
  EXPECT_NE(html.find("Look first at <b>correctness</b>: &#39;&lt;loss&gt;&#39; is NaN at step 200 "
                      "on rank 3"),
            std::string::npos)
      << html.substr(triage, 600);
  EXPECT_NE(html.find("<tr class=\"origin\" data-layer=\"correctness\">"), std::string::npos);
  EXPECT_NE(html.find("data-layer=\"stragglers\"><td class=\"n\">4</td><td>stragglers</td><td><span "
                      "class=\"badge v-regressed\">fail</span>"),
            std::string::npos);
  EXPECT_NE(html.find("data-layer=\"regression\"><td class=\"n\">5</td><td>regression</td><td><span "
                      "class=\"badge v-unknown\">not measured</span>"),
            std::string::npos);
  // Without a chain, no section.
  EXPECT_EQ(render_run_report(diagnosis.analysis().summary(), data, {"run", {}, {}, std::nullopt})
                .find("id=\"triage\""),
            std::string::npos);
}

// Steps near 2^63: the chart's x of a point (the middle of its steps) is taken in doubles; the
// sum of two such steps in an int64 overflowed (undefined behaviour) and drew the line back
// across the chart, with a "-0" tick.
TEST(RunReport, StepsNearTheLargestStepStayInOrderOnTheChart) {
  RunAnalysis analysis;
  RunReportData data;
  const std::int64_t top = std::numeric_limits<std::int64_t>::max();
  for (int i = 0; i < 30; ++i) {  // steps 0 to 140, then the 15 largest multiples of 10 below 2^63
    const std::int64_t step = i < 15 ? 10 * i : top - 7 - 10 * (29 - i);
    const Window w = window(step, {60, 60, 60, 60}, "node-1");
    data.add(w, analysis.add(w));
  }
  const std::string html = render_run_report(analysis.summary(), data, {"run", {}, {}, std::nullopt});
  std::size_t at = html.find("points=\"");
  ASSERT_NE(at, std::string::npos);
  int lines = 0;
  for (; at != std::string::npos; at = html.find("points=\"", at + 1)) {
    const std::size_t begin = at + 8, end = html.find('"', begin);
    std::istringstream in(html.substr(begin, end - begin));
    std::vector<double> xs;
    for (std::string pair; in >> pair;) xs.push_back(std::stod(pair.substr(0, pair.find(','))));
    ASSERT_GE(xs.size(), 2u);
    EXPECT_TRUE(std::is_sorted(xs.begin(), xs.end())) << html.substr(begin, end - begin);
    ++lines;
  }
  EXPECT_GE(lines, 1);
  EXPECT_EQ(html.find(">-0<"), std::string::npos);
}

TEST(CompareReport, HighlightsTheOrigin) {
  RunProfile base, cur;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(1.0, 0.02);
  for (int i = 0; i < 20; ++i) {
    for (int run = 0; run < 2; ++run) {
      Window w;
      w.step = 10 * i;
      for (int r = 0; r < 4; ++r) {
        StepSample s;
        s.rank = r;
        s.world_size = 4;
        s.step = w.step;
        s.cohort = "dp";
        s.stages = {{"forward", StageKind::compute, 60 * noise(rng), 1},
                    {"back<ward>", StageKind::compute, 40 * noise(rng) * (run ? 1.2 : 1.0), 1}};
        s.step_ms = s.stages[0].ms + s.stages[1].ms;
        w.samples.push_back(s);
      }
      (run ? cur : base).add(w);
    }
  }
  const Comparison c = compare_runs(base, cur);
  ASSERT_GE(c.origin, 0);
  const std::string html = render_compare_report(c, base, cur, "a", "b");
  EXPECT_NE(html.find("<tr class=\"origin\" data-stage=\"back&lt;ward&gt;\">"), std::string::npos);
  EXPECT_EQ(html.find("back<ward>"), std::string::npos);
  EXPECT_NE(html.find("id=\"forest\""), std::string::npos);
  EXPECT_NE(html.find("REGRESSED"), std::string::npos);
}

// Step times of any finite double: the chart's axes stay a handful of ticks. Every step_ms at the
// largest double made the step-time chart's y range infinite, and nice_ticks then allocated
// without end (std::bad_alloc, the report aborted); a range tiny next to its values (1e300 and
// its next double) stepped a tick value that no longer moved.
TEST(RunReport, StepTimesNearTheLargestDoubleGiveABoundedChart) {
  const double top = std::numeric_limits<double>::max();
  const std::vector<std::vector<double>> cases = {
      {top, top, top, top}, {1e300, std::nextafter(1e300, top), 1e300, 1e300},
      {top / 2, top, 1.0, top}, {5e-324, 1e-320, 5e-324, 5e-324}};
  for (const auto& ms : cases) {
    RunAnalysis analysis;
    RunReportData data;
    for (int i = 0; i < 40; ++i) {
      Window w = window(10 * i, {60, 60, 60, 60}, "node-1");
      for (std::size_t r = 0; r < w.samples.size(); ++r) w.samples[r].step_ms = ms[r];
      data.add(w, analysis.add(w));
    }
    const std::string html =
        render_run_report(analysis.summary(), data, {"run", {}, {}, std::nullopt});
    const std::size_t chart = html.find("id=\"steptime\"");
    ASSERT_NE(chart, std::string::npos);
    const std::string section = html.substr(chart, html.find("</section>", chart) - chart);
    std::size_t ticks = 0;
    for (std::size_t at = section.find("text-anchor=\"end\""); at != std::string::npos;
         at = section.find("text-anchor=\"end\"", at + 1))
      ++ticks;
    EXPECT_GE(ticks, 1u);
    EXPECT_LE(ticks, 12u);
    EXPECT_LT(section.size(), 20000u);
    EXPECT_EQ(section.find("inf"), std::string::npos);
    EXPECT_EQ(section.find("nan"), std::string::npos);
    // No tick label of hundreds of digits: large values are written with an exponent.
    EXPECT_EQ(section.find("0000000000000000000"), std::string::npos) << section.substr(0, 2000);
  }
}

// Tens of thousands of distinct stage names: gathering was quadratic (a scan of every stage and a
// vector insert per new name: 32k names took 22 s, 128k 141 s and a 69 MB page). Now a hash and a
// linked order; the heatmap draws at most 64 stage columns and says how many more there are.
TEST(RunReport, TensOfThousandsOfStagesGatherInLinearTimeAndThePageIsBounded) {
  constexpr int kStages = 60000;
  RunReportData data;
  RunAnalysis analysis;
  const auto started = std::chrono::steady_clock::now();
  for (int step = 0; step < 2; ++step) {
    Window w = window(step, {60, 60}, "node-1");
    Report report;
    for (int i = 0; i < kStages; ++i) {
      StageFigures f;
      f.cohort = "dp";
      f.stage = "s" + std::to_string(i);
      f.ref_ms = 1.0;
      f.rank_ids = {0, 1};
      f.rank_ms = {1.0, i == 4321 ? 3.0 : 1.0};
      report.stages.push_back(std::move(f));
    }
    data.add(w, report);
  }
  // A stage first seen after s10 in a later window goes right after it (pipeline order).
  {
    Window w = window(2, {60, 60}, "node-1");
    Report report;
    for (const char* name : {"s10", "late", "s11"}) {
      StageFigures f;
      f.cohort = "dp";
      f.stage = name;
      f.ref_ms = 1.0;
      f.rank_ids = {0, 1};
      f.rank_ms = {1.0, 1.0};
      report.stages.push_back(std::move(f));
    }
    data.add(w, report);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 20.0);  // about 0.1 s; quadratic: minutes
  ASSERT_EQ(data.stages().size(), static_cast<std::size_t>(kStages) + 1);
  const std::vector<std::uint32_t> order = data.pipeline_order();
  ASSERT_EQ(order.size(), data.stages().size());
  EXPECT_EQ(data.stages()[order[0]].name, "s0");
  EXPECT_EQ(data.stages()[order[11]].name, "late");
  EXPECT_EQ(data.stages()[order[12]].name, "s11");
  EXPECT_EQ(data.stages()[order.back()].name, "s" + std::to_string(kStages - 1));
  const std::string html =
      render_run_report(analysis.summary(), data, {"run", {}, {}, std::nullopt});
  EXPECT_LT(html.size(), 400000u);  // every column drawn: tens of MB
  EXPECT_NE(html.find("Showing 64 of 60001 stages (59937 more not drawn)"), std::string::npos);
  EXPECT_NE(html.find(">s4321</text>"), std::string::npos);  // the slowest stage is drawn
}

}  // namespace
}  // namespace laggard
