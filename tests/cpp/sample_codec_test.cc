#include "transport/sample_codec.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace laggard::wire {
namespace {

StepSample sample(int rank, std::int64_t step, int stages, double base = 10.0) {
  StepSample s;
  s.rank = rank;
  s.world_size = 16384;
  s.step = step;
  s.host = "node-" + std::to_string(rank / 8);
  s.cohort = rank % 2 ? "pp1" : "pp0";
  s.step_ms = 123.456789;
  for (int i = 0; i < stages; ++i) {
    StageTime t;
    t.name = "stage_" + std::to_string(i);
    t.kind = i == 3 ? StageKind::communication : StageKind::compute;
    t.ms = base + i * 0.1234567 + rank * 1e-3;
    t.calls = static_cast<std::uint32_t>(1 + i % 3);
    s.stages.push_back(t);
  }
  return s;
}

struct Decoded {
  std::vector<StepSample> samples;
  std::size_t used = 0;
  std::vector<RankCounts> counts;
};

Decoded decode(Decoder& d, const std::string& msg) {
  Decoded out;
  std::string error;
  EXPECT_TRUE(d.decode(msg, out.samples, out.used, out.counts, error)) << error;
  return out;
}

void expect_same(const StepSample& want, const StepSample& got) {
  EXPECT_EQ(got.rank, want.rank);
  EXPECT_EQ(got.world_size, want.world_size);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.host, want.host);
  EXPECT_EQ(got.cohort, want.cohort);
  EXPECT_EQ(got.step_ms, wire_ms(want.step_ms));
  if (std::isnan(want.work))
    EXPECT_TRUE(std::isnan(got.work));
  else
    EXPECT_EQ(got.work, want.work);  // bit-exact
  ASSERT_EQ(got.values.size(), want.values.size());
  for (std::size_t i = 0; i < want.values.size(); ++i) {
    EXPECT_EQ(got.values[i].name, want.values[i].name);
    EXPECT_EQ(std::memcmp(&got.values[i].value, &want.values[i].value, 8), 0) << i;  // bits
  }
  ASSERT_EQ(got.resources.size(), want.resources.size());
  for (std::size_t i = 0; i < want.resources.size(); ++i) {
    EXPECT_EQ(got.resources[i].name, want.resources[i].name);
    EXPECT_EQ(std::memcmp(&got.resources[i].value, &want.resources[i].value, 8), 0) << i;
  }
  ASSERT_EQ(got.stages.size(), want.stages.size());
  for (std::size_t i = 0; i < want.stages.size(); ++i) {
    EXPECT_EQ(got.stages[i].name, want.stages[i].name);
    EXPECT_EQ(got.stages[i].kind, want.stages[i].kind);
    EXPECT_EQ(got.stages[i].ms, wire_ms(want.stages[i].ms));
    EXPECT_NEAR(got.stages[i].ms, want.stages[i].ms, want.stages[i].ms * 1e-7);
    EXPECT_EQ(got.stages[i].calls, want.stages[i].calls);
  }
}

TEST(SampleCodec, RoundTripsSamplesAndCountsAcrossBatches) {
  Encoder enc;
  Decoder dec;
  for (std::uint64_t batch = 1; batch <= 3; ++batch) {
    enc.begin(batch);
    std::vector<StepSample> sent;
    for (int rank = 0; rank < 4; ++rank) {
      sent.push_back(sample(rank, static_cast<std::int64_t>(batch * 10), 6));
      if (rank == 2) sent.back().work = 4096.0 + 1e-9;
      enc.add(sent.back());
    }
    enc.add(RankCounts{3, 7, 2, batch == 3});
    const std::string msg = enc.message();
    enc.commit();
    Decoder::Header h;
    std::string error;
    ASSERT_TRUE(Decoder::header(msg, h, error)) << error;
    EXPECT_EQ(h.seq, batch);
    EXPECT_EQ(h.kind, Kind::batch);
    EXPECT_EQ(h.fresh, batch == 1);
    Decoded d = decode(dec, msg);
    ASSERT_EQ(d.used, sent.size());
    for (std::size_t i = 0; i < sent.size(); ++i) expect_same(sent[i], d.samples[i]);
    ASSERT_EQ(d.counts.size(), 1u);
    EXPECT_EQ(d.counts[0].rank, 3);
    EXPECT_EQ(d.counts[0].dropped, 7u);
    EXPECT_EQ(d.counts[0].errors, 2u);
    EXPECT_EQ(d.counts[0].final, batch == 3);
  }
}

TEST(SampleCodec, NamesAreSentOnceThenABatchCostsAtMostEightBytesPerStage) {
  Encoder enc;
  enc.begin(1);
  enc.add(sample(5, 0, 16));
  const std::size_t first = enc.message().size();
  enc.commit();
  for (int stages : {1, 4, 16, 64}) {
    Encoder e;
    e.begin(1);
    e.add(sample(5, 0, stages));
    e.commit();
    e.begin(2);
    e.add(sample(5, 10, stages));
    const std::size_t header = 6;  // the message header with a one-byte seq
    const std::size_t bytes = e.message().size() - header;
    // The per-rank budget: 8 bytes per stage and a small header per sample.
    EXPECT_LE(bytes, 8u * static_cast<std::size_t>(stages) + 16u) << stages << " stages";
    // type, rank and step (one byte each here), step_ms, flags, layout; ms and calls per stage
    EXPECT_EQ(bytes, 5u * static_cast<std::size_t>(stages) + 9u) << stages << " stages";
  }
  enc.begin(2);
  enc.add(sample(5, 10, 16));
  EXPECT_LT(enc.message().size() * 3, first);  // the definitions made the first batch large
}

TEST(SampleCodec, ARolledBackBatchDefinesItsNamesAgainInTheNext) {
  Encoder enc;
  Decoder dec;
  enc.begin(1);
  enc.add(sample(0, 0, 4));
  enc.rollback();  // not sent: the decoder never sees it
  enc.begin(1);
  enc.add(sample(0, 10, 4));
  const std::string msg = enc.message();
  enc.commit();
  Decoded d = decode(dec, msg);
  ASSERT_EQ(d.used, 1u);
  expect_same(sample(0, 10, 4), d.samples[0]);
}

TEST(SampleCodec, ResetStartsBothSidesAfresh) {
  Encoder enc;
  Decoder old_peer, new_peer;
  enc.begin(1);
  enc.add(sample(1, 0, 3));
  decode(old_peer, enc.message());
  enc.commit();
  enc.reset();  // a new parent, which knows nothing
  enc.begin(2);
  StepSample moved = sample(1, 10, 3);
  moved.host = "elsewhere";
  enc.add(moved);
  Decoded d = decode(new_peer, enc.message());
  ASSERT_EQ(d.used, 1u);
  expect_same(moved, d.samples[0]);
  // The old peer's tables are replaced too (fresh flag): no stale host survives.
  Decoded again = decode(old_peer, enc.message());
  ASSERT_EQ(again.used, 1u);
  EXPECT_EQ(again.samples[0].host, "elsewhere");
}

TEST(SampleCodec, ChangedRankIdentityAndStageKindsAreRedefined) {
  Encoder enc;
  Decoder dec;
  StepSample s = sample(2, 0, 2);
  enc.begin(1);
  enc.add(s);
  decode(dec, enc.message());
  enc.commit();
  s.cohort = "pp7";
  s.stages[1].kind = StageKind::data;
  s.stages.push_back(StageTime{"untimed", StageKind::other, 0.5, 0});
  enc.begin(2);
  enc.add(s);
  Decoded d = decode(dec, enc.message());
  ASSERT_EQ(d.used, 1u);
  expect_same(s, d.samples[0]);
}

TEST(SampleCodec, DecoderReusesSampleBuffers) {
  Encoder enc;
  Decoder dec;
  enc.begin(1);
  enc.add(sample(0, 0, 8));
  enc.add(sample(1, 0, 8));
  std::vector<StepSample> samples(2);
  std::size_t used = 0;
  std::vector<RankCounts> counts;
  std::string error;
  ASSERT_TRUE(dec.decode(enc.message(), samples, used, counts, error)) << error;
  EXPECT_EQ(samples.size(), 2u);
  EXPECT_EQ(used, 2u);
}

TEST(SampleCodec, MalformedMessagesAreRefusedWithAReason) {
  Decoder dec;
  std::vector<StepSample> samples;
  std::size_t used = 0;
  std::vector<RankCounts> counts;
  std::string error;
  EXPECT_FALSE(dec.decode("{\"schema\":1}", samples, used, counts, error));
  EXPECT_NE(error.find("not a laggard"), std::string::npos) << error;

  Encoder enc;
  enc.begin(1);
  enc.add(sample(0, 0, 4));
  const std::string good = enc.message();
  // Every truncation of a good batch is refused or decodes a prefix, never reads past the end.
  for (std::size_t n = 0; n < good.size(); ++n) {
    samples.clear();
    used = 0;
    counts.clear();
    Decoder fresh;
    const bool ok = fresh.decode(std::string_view(good).substr(0, n), samples, used, counts, error);
    EXPECT_TRUE(!ok || used == 0) << n;
  }
  // A sample that refers to a layout the decoder was never told about.
  Encoder later;
  later.begin(1);
  later.add(sample(0, 0, 4));
  later.commit();
  later.begin(2);
  later.add(sample(0, 10, 4));
  Decoder never_saw_first;
  samples.clear();
  used = 0;
  EXPECT_FALSE(never_saw_first.decode(later.message(), samples, used, counts, error));
  EXPECT_NE(error.find("malformed batch"), std::string::npos) << error;
  std::string wrong_version = good;
  wrong_version[2] = 9;
  EXPECT_FALSE(dec.decode(wrong_version, samples, used, counts, error));
  EXPECT_NE(error.find("wire version 9"), std::string::npos) << error;
}

TEST(SampleCodec, ValuesAndResourcesTravelBitForBit) {
  Encoder enc;
  Decoder dec;
  StepSample s = sample(3, 40, 4);
  s.values = {{"loss", 2.3125}, {"grad_norm", std::numeric_limits<double>::quiet_NaN()},
              {"tokens", -0.0}};
  s.resources = {{"gpu_sm_clock_mhz", 1410.0}, {"host_rss_bytes", 123456789012345.0},
                 {"throttle", std::numeric_limits<double>::infinity()}};
  enc.begin(1);
  enc.add(s);
  decode(dec, enc.message());  // defines the names
  enc.commit();
  s.step = 50;
  s.values[0].value = 2.25;
  enc.begin(2);
  enc.add(s);
  Decoded d = decode(dec, enc.message());
  ASSERT_EQ(d.used, 1u);
  expect_same(s, d.samples[0]);
  // Known names cost one byte each: 8 bytes of value plus 1 per value, n once per list.
  Encoder plain;
  StepSample without = s;
  without.values.clear();
  without.resources.clear();
  plain.begin(1);
  plain.add(without);
  plain.commit();
  plain.begin(2);
  plain.add(without);
  EXPECT_EQ(enc.message().size(), plain.message().size() + 2 + 6 * 9);
  // A sample without them after one with them: none decoded.
  enc.commit();
  enc.begin(3);
  enc.add(without);
  Decoded again = decode(dec, enc.message());
  ASSERT_EQ(again.used, 1u);
  EXPECT_TRUE(again.samples[0].values.empty() && again.samples[0].resources.empty());
}

TEST(SampleCodec, AcksCarryTheirSequenceNumber) {
  Decoder::Header h;
  std::string error;
  ASSERT_TRUE(Decoder::header(ack_message(123456789), h, error)) << error;
  EXPECT_EQ(h.kind, Kind::ack);
  EXPECT_EQ(h.seq, 123456789u);
}

StragglerVerdict verdict_with(std::size_t findings, std::size_t text) {
  StragglerVerdict v;
  v.seq = 42;
  v.step = 1230;
  v.ranks_seen = 4095;
  v.world_size = 4096;
  v.step_ms = 123.5;
  v.whatif_step_saving_ms = 30.25;
  v.likely_bottleneck = "forward";
  v.num_confirmed = static_cast<int>(findings) + 3;
  v.stop_step = 1300;
  for (std::size_t i = 0; i < findings; ++i) {
    VerdictFinding f;
    f.rank = static_cast<int>(4095 - i);
    f.host = "node-" + std::string(text, 'h');
    f.cohort = "pp1";
    f.stage = "forward_" + std::string(text, 's');
    f.kind = i % 2 ? StageKind::data : StageKind::compute;
    f.ms = 40.5;
    f.ref_ms = 20.25;
    f.slowdown = 2.0;
    f.cost_ms = 20.25;
    f.cost_share = 0.125;
    f.windows_flagged = 7;
    f.reason = "its own compute; " + std::string(text, 'r');
    f.onset_step = 1200;
    f.confirmed_step = 1225;
    f.windows_held = 3;
    v.confirmed.push_back(f);
  }
  return v;
}

TEST(SampleCodec, VerdictsRoundTrip) {
  const StragglerVerdict v = verdict_with(2, 3);
  const std::vector<RankScore> scores = {{3, 1.0f, false}, {17, 0.5f, true}, {4095, 0.25f, false}};
  std::string bytes;
  encode_verdict(v, scores, bytes);
  Decoder::Header h;
  std::string error;
  ASSERT_TRUE(Decoder::header(bytes, h, error)) << error;
  EXPECT_EQ(h.kind, Kind::verdict);
  StragglerVerdict got;
  std::vector<RankScore> got_scores;
  ASSERT_TRUE(decode_verdict(bytes, got, got_scores, error)) << error;
  EXPECT_EQ(got.seq, 42u);
  EXPECT_EQ(got.step, 1230);
  EXPECT_EQ(got.ranks_seen, 4095);
  EXPECT_EQ(got.world_size, 4096);
  EXPECT_EQ(got.step_ms, 123.5);
  EXPECT_EQ(got.whatif_step_saving_ms, 30.25);
  EXPECT_EQ(got.likely_bottleneck, "forward");
  EXPECT_EQ(got.num_confirmed, 5);
  ASSERT_EQ(got.confirmed.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const VerdictFinding& a = v.confirmed[i];
    const VerdictFinding& b = got.confirmed[i];
    EXPECT_EQ(b.rank, a.rank);
    EXPECT_EQ(b.host, a.host);
    EXPECT_EQ(b.cohort, a.cohort);
    EXPECT_EQ(b.stage, a.stage);
    EXPECT_EQ(b.kind, a.kind);
    EXPECT_EQ(b.ms, a.ms);
    EXPECT_EQ(b.ref_ms, a.ref_ms);
    EXPECT_EQ(b.slowdown, a.slowdown);
    EXPECT_EQ(b.cost_ms, a.cost_ms);
    EXPECT_EQ(b.cost_share, a.cost_share);
    EXPECT_EQ(b.windows_flagged, 7);
    EXPECT_EQ(b.reason, a.reason);
    EXPECT_EQ(b.onset_step, 1200);
    EXPECT_EQ(b.confirmed_step, 1225);
    EXPECT_EQ(b.windows_held, 3);
  }
  EXPECT_EQ(got.stop_step, 1300);
  ASSERT_EQ(got_scores.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got_scores[i].rank, scores[i].rank);
    EXPECT_NEAR(got_scores[i].score, scores[i].score, 1.0 / 65535);
    EXPECT_EQ(got_scores[i].confirmed, scores[i].confirmed);
  }
  // No stop step: -1 travels as such.
  StragglerVerdict none = verdict_with(1, 1);
  none.stop_step = -1;
  encode_verdict(none, {}, bytes);
  ASSERT_TRUE(decode_verdict(bytes, got, got_scores, error)) << error;
  EXPECT_EQ(got.stop_step, -1);
}

// An acknowledgement owed to the child rides on the verdict going to it: the header carries it,
// the verdict reads the same, and neither a verdict without one nor a batch has one.
TEST(SampleCodec, AnAcknowledgementRidesOnAVerdict) {
  const StragglerVerdict v = verdict_with(1, 2);
  const std::vector<RankScore> scores = {{5, 0.75f, true}};
  std::string plain, riding;
  encode_verdict(v, scores, plain);
  encode_verdict(v, scores, riding, 300);
  EXPECT_EQ(riding.size(), plain.size() + 2);  // 300 as a varint
  Decoder::Header h;
  std::string error;
  ASSERT_TRUE(Decoder::header(riding, h, error)) << error;
  EXPECT_EQ(h.kind, Kind::verdict);
  EXPECT_EQ(h.seq, 42u);
  EXPECT_EQ(h.ack, 300u);
  ASSERT_TRUE(Decoder::header(plain, h, error)) << error;
  EXPECT_EQ(h.ack, 0u);
  StragglerVerdict a, b;
  std::vector<RankScore> sa, sb;
  ASSERT_TRUE(decode_verdict(plain, a, sa, error)) << error;
  ASSERT_TRUE(decode_verdict(riding, b, sb, error)) << error;
  EXPECT_EQ(b.seq, a.seq);
  EXPECT_EQ(b.step, a.step);
  EXPECT_EQ(b.stop_step, a.stop_step);
  ASSERT_EQ(b.confirmed.size(), 1u);
  EXPECT_EQ(b.confirmed[0].reason, a.confirmed[0].reason);
  EXPECT_EQ(b.confirmed[0].windows_held, a.confirmed[0].windows_held);
  ASSERT_EQ(sb.size(), 1u);
  EXPECT_EQ(sb[0].rank, 5);
  EXPECT_TRUE(sb[0].confirmed);
  // Cut inside the riding acknowledgement: refused.
  EXPECT_FALSE(Decoder::header(riding.substr(0, 7), h, error));
  Encoder enc;
  enc.begin(7);
  enc.add(RankCounts{3, 0, 0, false});
  ASSERT_TRUE(Decoder::header(enc.message(), h, error)) << error;
  EXPECT_EQ(h.kind, Kind::batch);
  EXPECT_EQ(h.ack, 0u);
}

TEST(SampleCodec, VerdictsStayBoundedAtFourThousandRanks) {
  // A host member's verdict: the summary, the findings and its own score.
  std::string bytes;
  encode_verdict(verdict_with(1, 8), {{4093, 0.9f, false}}, bytes);
  EXPECT_LT(bytes.size(), 150u) << bytes.size();
  // The worst case: more confirmed than travel, texts at their cut, every rank's score (a
  // leader over the whole world, as in a chain of hosts).
  std::vector<RankScore> all;
  for (int r = 0; r < 4096; ++r) all.push_back({r, 0.5f, r % 7 == 0});
  encode_verdict(verdict_with(40, 1000), all, bytes);
  // Four texts of at most 256 bytes, 22 bytes of figures and 3 steps' varints per finding, 3
  // bytes a score, the stop step.
  EXPECT_LE(bytes.size(),
            64 + StragglerVerdict::kMaxFindings * (4 * 258 + 26 + 6) + 3 * 4096 + 4 + 3);
  StragglerVerdict got;
  std::vector<RankScore> scores;
  std::string error;
  ASSERT_TRUE(decode_verdict(bytes, got, scores, error)) << error;
  EXPECT_EQ(got.confirmed.size(), StragglerVerdict::kMaxFindings);
  EXPECT_EQ(got.num_confirmed, 43);
  EXPECT_EQ(got.confirmed[0].reason.size(), 256u);
  EXPECT_EQ(scores.size(), 4096u);
  EXPECT_TRUE(scores[7].confirmed);
  EXPECT_FALSE(scores[8].confirmed);
}

TEST(SampleCodec, MalformedVerdictsAreRefusedNotRead) {
  std::string bytes;
  encode_verdict(verdict_with(3, 5), {{1, 0.5f, true}, {2, 1.0f, false}}, bytes);
  StragglerVerdict got;
  std::vector<RankScore> scores;
  std::string error;
  // Every truncation is refused, never read past its end.
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(decode_verdict(std::string_view(bytes).substr(0, n), got, scores, error)) << n;
  EXPECT_FALSE(decode_verdict(bytes + "x", got, scores, error));
  EXPECT_NE(error.find("trailing bytes"), std::string::npos) << error;
  // A score count beyond what the message can hold is refused before anything is allocated.
  std::string huge;
  StragglerVerdict empty = verdict_with(0, 0);
  empty.stop_step = -1;
  encode_verdict(empty, {}, huge);
  huge.resize(huge.size() - 2);  // the count 0 and the stop step's 0 after it
  huge += std::string("\xff\xff\xff\xff\x0f", 5);
  EXPECT_FALSE(decode_verdict(huge, got, scores, error));
  EXPECT_NE(error.find("score count"), std::string::npos) << error;
  // More findings listed than it says are confirmed.
  StragglerVerdict lying = verdict_with(2, 1);
  lying.num_confirmed = 1;
  std::string lie;
  encode_verdict(lying, {}, lie);
  EXPECT_FALSE(decode_verdict(lie, got, scores, error));
  EXPECT_NE(error.find("summary"), std::string::npos) << error;
  // A batch is not a verdict, and a verdict is not a batch.
  Decoder dec;
  std::vector<StepSample> samples;
  std::size_t used = 0;
  std::vector<RankCounts> counts;
  EXPECT_FALSE(dec.decode(bytes, samples, used, counts, error));
  EXPECT_EQ(error, "not a batch");
  Encoder enc;
  enc.begin(1);
  enc.add(sample(0, 0, 2));
  EXPECT_FALSE(decode_verdict(enc.message(), got, scores, error));
  EXPECT_EQ(error, "not a verdict");
  // Random bytes after a verdict header never crash the decoder.
  std::uint32_t x = 12345;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string junk = bytes.substr(0, 6);
    const int n = static_cast<int>(x % 64);
    for (int i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      junk.push_back(static_cast<char>(x >> 24));
    }
    decode_verdict(junk, got, scores, error);  // whatever it says, it returns
  }
}

}  // namespace
}  // namespace laggard::wire
