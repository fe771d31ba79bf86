// The triage chain: the correctness gate (non-finite values, jumps out of their own range), the
// reasons resource readings support, the timeline of sample logs, and the chain's order.
#include "laggard/diagnose.hpp"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "laggard/timeline.hpp"
#include "laggard/trace.hpp"

namespace laggard {
namespace {

// One window: `ranks` ranks, a 30 ms forward, a 15 ms allreduce and a step of 47 ms, each rank's
// values and resources given by the callbacks.
template <typename Fill>
Window window(std::int64_t step, int ranks, Fill fill) {
  Window w;
  w.step = step;
  for (int r = 0; r < ranks; ++r) {
    StepSample s;
    s.rank = r;
    s.world_size = ranks;
    s.step = step;
    s.host = "node-" + std::to_string(r / 4);
    s.step_ms = 47.0;  // 2 ms outside the sections: under the timeline's 10 %
    s.stages = {{"forward", StageKind::compute, 30.0, 1},
                {"allreduce", StageKind::communication, 15.0, 1}};
    fill(s);
    w.samples.push_back(std::move(s));
  }
  return w;
}

void set(std::vector<NamedValue>& v, const std::string& name, double value) {
  for (auto& x : v)
    if (x.name == name) {
      x.value = value;
      return;
    }
  v.push_back({name, value});
}

TEST(Correctness, ANanLossIsNamedWithItsStepAndRank) {
  CorrectnessGate gate;
  std::mt19937 gen(1);
  std::normal_distribution<double> noise(0.0, 0.02);
  for (int step = 0; step < 40; ++step)
    gate.add(window(step, 4, [&](StepSample& s) {
      double loss = 3.0 - 0.01 * step + noise(gen);
      if (step == 23 && s.rank == 2) loss = std::numeric_limits<double>::quiet_NaN();
      set(s.values, "loss", loss);
    }));
  ASSERT_EQ(gate.findings_total(), 1u);
  const CorrectnessFinding& f = gate.findings()[0];
  EXPECT_EQ(f.kind, CorrectnessFinding::Kind::non_finite);
  EXPECT_EQ(f.step, 23);
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.name, "loss");
  EXPECT_EQ(gate.values_seen(), 160u);
}

TEST(Correctness, AJumpOutsideTheRecentRangeIsAFindingANoisyDeclineIsNot) {
  CorrectnessGate gate;
  std::mt19937 gen(2);
  std::normal_distribution<double> noise(0.0, 0.05);
  for (int step = 0; step < 200; ++step)
    gate.add(window(step, 8, [&](StepSample& s) {
      double loss = 4.0 * std::exp(-step / 80.0) + 1.0 + noise(gen);
      if (step == 150 && s.rank == 5) loss = 40.0;  // a spike
      set(s.values, "loss", loss);
      set(s.values, "grad_norm", 1.0 + 0.1 * noise(gen));
    }));
  ASSERT_EQ(gate.findings_total(), 1u);
  const CorrectnessFinding& f = gate.findings()[0];
  EXPECT_EQ(f.kind, CorrectnessFinding::Kind::jump);
  EXPECT_EQ(f.step, 150);
  EXPECT_EQ(f.rank, 5);
  EXPECT_LT(f.recent_high, 3.0);
}

TEST(Correctness, InfinityIsAFindingAndWorkCountsNeverJump) {
  CorrectnessGate gate;
  for (int step = 0; step < 30; ++step)
    gate.add(window(step, 2, [&](StepSample& s) {
      set(s.values, "tokens", step < 20 ? 4096.0 : 8192.0);  // a new batch size: not a finding
      if (step == 25 && s.rank == 1) set(s.values, "grad_norm", HUGE_VAL);
    }));
  ASSERT_EQ(gate.findings_total(), 1u);
  EXPECT_EQ(gate.findings()[0].name, "grad_norm");
  EXPECT_EQ(gate.findings()[0].step, 25);
}

TEST(Correctness, FindingsKeptAreBoundedAndAllAreCounted) {
  CorrectnessOptions o;
  o.max_findings = 3;
  CorrectnessGate gate(o);
  for (int step = 0; step < 10; ++step)
    gate.add(window(step, 2, [&](StepSample& s) {
      set(s.values, "loss", std::numeric_limits<double>::quiet_NaN());
    }));
  EXPECT_EQ(gate.findings().size(), 3u);
  EXPECT_EQ(gate.findings_total(), 20u);
  EXPECT_EQ(gate.count_of(1, "loss"), 10u);
  CorrectnessOptions bad;
  bad.min_history = 1;
  EXPECT_THROW(CorrectnessGate{bad}, std::invalid_argument);
}

// Resource readings of 8 ranks over 10 windows; `odd` changes rank 3's.
template <typename Odd>
ResourceProfile profile(Odd odd) {
  ResourceProfile p;
  for (int step = 0; step < 10; ++step)
    p.add(window(step, 8, [&](StepSample& s) {
      set(s.resources, "gpu_sm_clock_mhz", 1980);
      set(s.resources, "gpu_sm_clock_max_mhz", 1980);
      set(s.resources, "gpu_throttle_thermal", 0);
      set(s.resources, "gpu_pcie_gen", 5);
      set(s.resources, "gpu_pcie_gen_max", 5);
      set(s.resources, "gpu_pcie_width", 16);
      set(s.resources, "gpu_pcie_width_max", 16);
      set(s.resources, "host_train_thread_cpu_pct", 60);
      set(s.resources, "host_top_thread_cpu_pct", 5);
      set(s.resources, "host_gc_pause_ms", 0.2);
      set(s.resources, "host_data_wait_ms", 0.5);
      set(s.resources, "cuda_alloc_retries", 0);
      set(s.values, "tokens", 4096);
      if (s.rank == 3) odd(s, step);
    }));
  return p;
}

std::vector<std::string> codes(const std::vector<Reason>& reasons) {
  std::vector<std::string> out;
  for (const auto& r : reasons) out.push_back(r.code);
  return out;
}

TEST(Reasons, AHealthyRankHasNone) {
  const ResourceProfile p = profile([](StepSample&, int) {});
  for (int r = 0; r < 8; ++r) EXPECT_TRUE(resource_reasons(p, r).empty()) << r;
}

TEST(Reasons, ThermalThrottlingCitesTheClockAndTheWindows) {
  const ResourceProfile p = profile([](StepSample& s, int step) {
    set(s.resources, "gpu_sm_clock_mhz", 1410);
    set(s.resources, "gpu_throttle_thermal", step == 0 ? 0 : 1);
  });
  const auto reasons = resource_reasons(p, 3);
  ASSERT_EQ(codes(reasons), std::vector<std::string>{"thermal_throttle"});
  EXPECT_EQ(reasons[0].evidence,
            "SM clock 1,410 MHz mean, of 1,980 MHz (the cohort's median rank: 1,980 MHz), thermal throttle "
            "in 9 of 10 windows (the cohort's median rank: 0% of windows)");
  EXPECT_TRUE(resource_reasons(p, 2).empty());
}

TEST(Reasons, EachCauseIsNamedFromItsReadings) {
  const auto only = [](auto odd) { return codes(resource_reasons(profile(odd), 3)); };
  EXPECT_EQ(only([](StepSample& s, int) { set(s.resources, "gpu_sm_clock_mhz", 1500); }),
            std::vector<std::string>{"clock_drop"});
  EXPECT_EQ(only([](StepSample& s, int) { set(s.resources, "gpu_pcie_width", 8); }),
            std::vector<std::string>{"pcie_downgraded"});
  EXPECT_EQ(only([](StepSample& s, int) { set(s.resources, "host_top_thread_cpu_pct", 99); }),
            std::vector<std::string>{"host_bound"});
  // Another thread at 60 % of a core takes it (or the GIL) from the training thread; at 40 %
  // (35 points over the others' 5 %) it is not host-bound.
  EXPECT_EQ(only([](StepSample& s, int) { set(s.resources, "host_top_thread_cpu_pct", 60); }),
            std::vector<std::string>{"host_bound"});
  EXPECT_TRUE(only([](StepSample& s, int) { set(s.resources, "host_top_thread_cpu_pct", 40); })
                  .empty());
  EXPECT_EQ(only([](StepSample& s, int) { set(s.resources, "host_gc_pause_ms", 12); }),
            std::vector<std::string>{"gc_pauses"});
  EXPECT_EQ(only([](StepSample& s, int) { set(s.resources, "host_data_wait_ms", 25); }),
            std::vector<std::string>{"data_starvation"});
  EXPECT_EQ(only([](StepSample& s, int) { set(s.values, "tokens", 6144); }),
            std::vector<std::string>{"more_work"});
  EXPECT_EQ(only([](StepSample& s, int step) {
              set(s.resources, "cuda_alloc_retries", step * 3);
            }),
            std::vector<std::string>{"memory_pressure"});
  EXPECT_EQ(only([](StepSample& s, int step) {
              set(s.resources, "gpu_ecc_corrected", 100 + step);
            }),
            std::vector<std::string>{"ecc_errors"});
}

TEST(Reasons, OneWindowOfALowLinkOrAFlagIsNotEvidence) {
  const ResourceProfile p = profile([](StepSample& s, int step) {
    if (step == 4) {
      set(s.resources, "gpu_pcie_gen", 1);  // an idle link steps down
      set(s.resources, "gpu_throttle_thermal", 1);
    }
  });
  EXPECT_TRUE(resource_reasons(p, 3).empty());
}

// A run of 4 ranks, 30 windows: rank 1 slow in forward from window 5 (its readings `odd`), the
// others waiting for it in the allreduce.
template <typename Odd>
RunDiagnosis straggler_run(Odd odd, int nan_step = -1) {
  RunDiagnosis d;
  for (int step = 0; step < 30; ++step)
    d.add(window(step, 4, [&](StepSample& s) {
      set(s.values, "loss", step == nan_step && s.rank == 0
                                ? std::numeric_limits<double>::quiet_NaN()
                                : 2.0 - 0.01 * step + 0.001 * s.rank);
      set(s.resources, "host_gc_pause_ms", 0.1);
      const double jitter = 1.0 + 0.01 * ((step * 7 + s.rank * 3) % 5);
      s.stages[0].ms *= jitter;
      if (s.rank == 1 && step >= 5) {
        s.stages[0].ms = 60.0;
        s.stages[1].ms = 2.0;
        odd(s);
      } else if (step >= 5) {
        s.stages[1].ms = 45.0;  // waiting for rank 1
      }
      s.step_ms = s.stages[0].ms + s.stages[1].ms + 2.0;
    }));
  return d;
}

TEST(Diagnosis, TheChainNamesTheStragglerWithItsReasonAndTheWaitsAsItsSymptom) {
  const RunDiagnosis run = straggler_run([](StepSample& s) {
    set(s.resources, "host_gc_pause_ms", 25.0);
  });
  const Diagnosis d = run.finish();
  ASSERT_EQ(d.layers.size(), 5u);
  EXPECT_EQ(d.layers[0].name, "correctness");
  EXPECT_EQ(d.layers[0].status, DiagnosisLayer::Status::pass);
  EXPECT_EQ(d.layers[1].name, "resources");
  EXPECT_EQ(d.layers[1].status, DiagnosisLayer::Status::fail);
  ASSERT_EQ(d.layers[1].findings.size(), 1u);
  EXPECT_EQ(d.layers[1].findings[0].kind, "gc_pauses");
  EXPECT_EQ(d.layers[1].findings[0].rank, 1);
  EXPECT_EQ(d.layers[2].name, "timeline");
  // The others' wait in the allreduce is a finding the stragglers explain: the layer passes.
  EXPECT_EQ(d.layers[2].status, DiagnosisLayer::Status::pass);
  ASSERT_FALSE(d.layers[2].findings.empty());
  EXPECT_EQ(d.layers[2].findings[0].kind, "comm_wait");
  EXPECT_TRUE(d.layers[2].findings[0].explained_by_stragglers);
  EXPECT_EQ(d.layers[2].findings[0].ranks, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(d.layers[3].name, "stragglers");
  EXPECT_EQ(d.layers[3].status, DiagnosisLayer::Status::fail);
  ASSERT_EQ(d.layers[3].findings.size(), 1u);
  const DiagnosisFinding& s = d.layers[3].findings[0];
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.stage, "forward");
  ASSERT_EQ(codes(s.reasons), std::vector<std::string>{"gc_pauses"});
  EXPECT_NE(s.text.find("Python garbage collection 20.9 ms per step"), std::string::npos) << s.text;
  EXPECT_EQ(d.layers[4].name, "regression");
  EXPECT_EQ(d.layers[4].status, DiagnosisLayer::Status::not_measured);
  EXPECT_EQ(d.first_failing, 1);  // resources, before the stragglers it explains
}

TEST(Diagnosis, AStragglerWithoutEvidenceHasReasonUnknown) {
  const Diagnosis d = straggler_run([](StepSample&) {}).finish();
  EXPECT_EQ(d.layers[1].status, DiagnosisLayer::Status::pass);
  ASSERT_EQ(d.layers[3].findings.size(), 1u);
  EXPECT_TRUE(d.layers[3].findings[0].reasons.empty());
  EXPECT_NE(d.layers[3].findings[0].text.find("reason: unknown (its resource readings do not "
                                              "differ from its cohort's)"),
            std::string::npos);
  EXPECT_EQ(d.first_failing, 3);
}

TEST(Diagnosis, ANanLossStopsTheChainAtCorrectness) {
  const Diagnosis d = straggler_run([](StepSample&) {}, 12).finish();
  EXPECT_EQ(d.layers[0].status, DiagnosisLayer::Status::fail);
  ASSERT_EQ(d.layers[0].findings.size(), 1u);
  EXPECT_EQ(d.layers[0].findings[0].text, "'loss' is NaN at step 12 on rank 0");
  EXPECT_EQ(d.first_failing, 0);
}

TEST(Diagnosis, WithoutValuesOrResourcesThoseLayersAreNotMeasured) {
  RunDiagnosis run;
  for (int step = 0; step < 20; ++step) run.add(window(step, 4, [](StepSample&) {}));
  const Diagnosis d = run.finish();
  EXPECT_EQ(d.layers[0].status, DiagnosisLayer::Status::not_measured);
  EXPECT_EQ(d.layers[1].status, DiagnosisLayer::Status::not_measured);
  EXPECT_EQ(d.layers[2].status, DiagnosisLayer::Status::pass);
  EXPECT_EQ(d.layers[3].status, DiagnosisLayer::Status::pass);
  EXPECT_EQ(d.first_failing, -1);
}

TEST(Diagnosis, DataWaitsAndUntimedTimeFailTheTimeline) {
  RunDiagnosis run;
  for (int step = 0; step < 20; ++step)
    run.add(window(step, 4, [](StepSample& s) {
      s.stages.push_back({"dataloader", StageKind::data, s.rank == 2 ? 20.0 : 0.5, 1});
      s.step_ms = 45.5 + (s.rank == 2 ? 20.0 : 0.5) + 12.0;  // 12 ms outside every section
    }));
  const Diagnosis d = run.finish();
  const DiagnosisLayer& t = d.layers[2];
  EXPECT_EQ(t.status, DiagnosisLayer::Status::fail);
  ASSERT_EQ(t.findings.size(), 2u);
  EXPECT_EQ(t.findings[0].kind, "data_wait");
  EXPECT_EQ(t.findings[0].ranks, std::vector<int>{2});
  EXPECT_EQ(t.findings[1].kind, "untimed");
  EXPECT_EQ(t.findings[1].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(t.findings[1].text.find("every rank"), std::string::npos);
}

// The sample path's rule: a stage named "...data..." that is a collective (TorchRec's input
// all-to-all, its kind guessed from the name as for a rank log that does not give it) is time
// waiting for other ranks, not input loading: no data wait, a communication wait.
TEST(Diagnosis, AnAllToAllNamedDataIsNotADataWait) {
  RunDiagnosis run;
  for (int step = 0; step < 20; ++step)
    run.add(window(step, 4, [](StepSample& s) {
      const double ms = s.rank == 2 ? 0.5 : 20.0;  // ranks 0, 1, 3 wait for rank 2
      s.stages.push_back({"sparse_data_dist", default_stage_kind("sparse_data_dist"), ms, 1});
      s.step_ms = 45.5 + ms + 1.0;
    }));
  const Diagnosis d = run.finish();
  const DiagnosisLayer& t = d.layers[2];
  ASSERT_FALSE(t.findings.empty());
  for (const auto& f : t.findings) EXPECT_NE(f.kind, "data_wait") << f.text;
  EXPECT_EQ(t.findings[0].kind, "comm_wait");
  EXPECT_EQ(t.findings[0].ranks, (std::vector<int>{0, 1, 3}));
}

const std::string kData = LAGGARD_TEST_DATA;

// The chain over a directory of profiler traces, as laggard diagnose runs it.
Diagnosis diagnose_traces(const std::string& dir) {
  TraceRunReader reader(dir);
  RunDiagnosis run;
  Window w;
  while (reader.next(w)) run.add(w);
  std::vector<RankTrace> ranks = reader.ranks();
  const TimelineSummary timeline = analyze_timeline(ranks);
  return run.finish(&timeline);
}

bool has_kind(const DiagnosisLayer& layer, const std::string& kind) {
  for (const auto& f : layer.findings)
    if (f.kind == kind) return true;
  return false;
}

// Real CPU traces of two gloo ranks (tests/data/record_wait_traces.py): rank 0's DataLoader takes
// 25 ms more per batch. Without device activity the chain's timeline is the host-side stages':
// rank 0 waits for data in its DataLoader's __next__; rank 1 waits for rank 0 in the all-reduce.
TEST(Diagnosis, ARealSlowDataLoaderIsADataWait) {
  const Diagnosis d = diagnose_traces(kData + "/trace-cpu-slow-loader");
  const DiagnosisLayer& t = d.layers[2];
  EXPECT_EQ(t.status, DiagnosisLayer::Status::fail);
  const DiagnosisFinding* data = nullptr;
  for (const auto& f : t.findings)
    if (f.kind == "data_wait") data = &f;
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->ranks, std::vector<int>{0});
  EXPECT_NE(data->text.find("waiting for data"), std::string::npos) << data->text;
}

// Real CPU traces of the same job whose rank 0 is slow before an all-to-all recorded as
// "## sparse_data_dist ##" (TorchRec's name for its input all-to-all): rank 1 waits there for
// rank 0. A wait for another rank, not for data.
TEST(Diagnosis, ARealCollectiveNamedDataIsACommunicationWait) {
  const Diagnosis d = diagnose_traces(kData + "/trace-cpu-comm-named-data");
  const DiagnosisLayer& t = d.layers[2];
  EXPECT_FALSE(has_kind(t, "data_wait"));
  const DiagnosisFinding* wait = nullptr;
  for (const auto& f : t.findings)
    if (f.kind == "comm_wait") wait = &f;
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->ranks, std::vector<int>{1});
  EXPECT_TRUE(wait->explained_by_stragglers);
}

// Rank 0 of a 16-rank TorchRec job on a GPU (tests/data/trace-torchrec, real, trimmed): the
// device idles while the host is in "## sparse_data_dist ##"; no DataLoader event. The chain
// points to communication, not to input loading.
TEST(Diagnosis, TorchRecsInputAllToAllIsCommunicationIdle) {
  const Diagnosis d = diagnose_traces(kData + "/trace-torchrec");
  const DiagnosisLayer& t = d.layers[2];
  EXPECT_EQ(t.status, DiagnosisLayer::Status::fail);
  EXPECT_FALSE(has_kind(t, "data_wait"));
  ASSERT_FALSE(t.findings.empty());
  const DiagnosisFinding& f = t.findings[0];
  EXPECT_EQ(f.kind, "comm_idle");
  EXPECT_FALSE(f.explained_by_stragglers);  // its only rank: the communication itself
  EXPECT_NE(f.text.find("while the host was in a collective"), std::string::npos) << f.text;
  EXPECT_NE(f.text.find("not input loading"), std::string::npos) << f.text;
}

// Communication idle on some ranks only: they wait for the others (the stragglers layer names
// who is late); it does not fail the timeline.
TEST(Diagnosis, CommunicationIdleOnSomeRanksIsExplainedByStragglers) {
  TimelineSummary sum;
  for (int r = 0; r < 4; ++r) {
    RankTimelineSummary s;
    s.rank = r;
    s.steps = 10;
    s.window_ms = 100.0;
    sum.ranks.push_back(s);
  }
  TimelineFinding f;
  f.kind = TimelineFinding::Kind::comm_idle;
  f.ranks = {0, 1, 3};
  f.every_rank = true;
  f.ms_per_step = 20.0;
  f.share = 0.2;
  sum.findings.push_back(f);
  RunDiagnosis run;
  for (int step = 0; step < 5; ++step) run.add(window(step, 4, [](StepSample&) {}));
  Diagnosis d = run.finish(&sum);
  ASSERT_EQ(d.layers[2].findings.size(), 1u);
  EXPECT_TRUE(d.layers[2].findings[0].explained_by_stragglers);
  EXPECT_EQ(d.layers[2].status, DiagnosisLayer::Status::pass);
  EXPECT_NE(d.layers[2].findings[0].text.find("waiting for ranks that reach it later"),
            std::string::npos)
      << d.layers[2].findings[0].text;
  // On every rank: the communication itself, a failure of the layer.
  sum.findings[0].ranks = {0, 1, 2, 3};
  d = run.finish(&sum);
  EXPECT_FALSE(d.layers[2].findings[0].explained_by_stragglers);
  EXPECT_EQ(d.layers[2].status, DiagnosisLayer::Status::fail);
}

TEST(Diagnosis, TheRegressionLayerNamesTheFirstRegressedStage) {
  RunProfile base, cur;
  for (int step = 0; step < 40; ++step) {
    const auto fill = [&](double fwd) {
      return window(step, 4, [&](StepSample& s) {
        s.stages[0].ms = fwd * (1.0 + 0.01 * ((step + s.rank) % 3));
        s.step_ms = s.stages[0].ms + s.stages[1].ms + 2.0;
      });
    };
    base.add(fill(30.0));
    cur.add(fill(39.0));
  }
  const Comparison c = compare_runs(base, cur);
  RunDiagnosis run;
  const Diagnosis d = run.finish(nullptr, &c);
  const DiagnosisLayer& r = d.layers[4];
  EXPECT_EQ(r.status, DiagnosisLayer::Status::fail);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].kind, "first_regression");
  EXPECT_EQ(r.findings[0].stage, "forward");
}

}  // namespace
}  // namespace laggard
