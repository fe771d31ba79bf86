// The comparison report (render_compare_report): per-stage verdicts with the origin
// highlighted, a forest plot of the ratios and their intervals, the step time of both runs, and
// the per-rank comparison.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "laggard/html_report.hpp"
#include "sinks/html/charts.hpp"
#include "sinks/html/format.hpp"
#include "sinks/html/page.hpp"

namespace laggard {

using namespace html;

std::string render_compare_report(const Comparison& cmp, const RunProfile& baseline,
                                  const RunProfile& current, const std::string& baseline_dir,
                                  const std::string& current_dir) {
  const CompareOptions& o = cmp.options;
  bool name_cohort = false;
  for (const auto& s : cmp.stages)
    if (s.cohort != cmp.stages.front().cohort) name_cohort = true;
  const auto label = [&](const StageComparison& s) {
    return stage_label(s.stage, s.cohort, name_cohort);
  };

  std::string out;
  out.reserve(64 << 10);
  page_begin(out, "laggard compare: " + baseline_dir + " vs " + current_dir);
  const auto run_line = [](const char* what, const std::string& dir, const RunOverview& r) {
    return std::string("<p class=\"sub\">") + what + ": <span class=\"mono\">" + html_escape(dir) +
           "</span> · " + std::to_string(r.ranks) + " ranks (world size " +
           std::to_string(r.world_size) + ") · " + std::to_string(r.windows) + " sampled steps (" +
           std::to_string(r.first_step) + "–" + std::to_string(r.last_step) + "), " +
           (r.warmup == 0 ? std::string("no warm-up skipped")
                          : "the first " + std::to_string(r.warmup) + " skipped as warm-up") +
           "</p>";
  };
  out += "<header><h1>laggard compare</h1>" + run_line("baseline", baseline_dir, cmp.baseline) +
         run_line("current", current_dir, cmp.current) +
         "<p class=\"sub\">per step the median over ranks; ratio of medians with a " +
         num(100 * (1 - o.alpha), 0) + "% bootstrap interval (" + std::to_string(o.resamples) +
         " resamples) and a Mann–Whitney U test, Holm-corrected over " +
         std::to_string(cmp.stages_tested) + " stages; REGRESSED when the interval lies above " +
         num(1 + o.relative_threshold, 2) + " and p &lt; " + num(o.alpha, 2) + "</p></header>\n";

  out += "<section class=\"cards\">\n";
  if (cmp.origin >= 0) {
    const auto& s = cmp.stages[static_cast<std::size_t>(cmp.origin)];
    card(out, "Origin (first regressed stage)", html_escape(label(s)),
         num(s.ratio, 3) + "×, +" + num(s.delta_ms, 2) + " ms per step");
  } else {
    card(out, "Origin", "none", "no stage regressed");
  }
  {
    int regressed = 0;
    for (const auto& s : cmp.stages) regressed += s.verdict == Verdict::regressed;
    card(out, "Stages regressed",
         std::to_string(regressed) + " of " + std::to_string(cmp.stages.size()),
         cmp.victims.empty() ? std::string("no later regressed stages")
                             : std::to_string(cmp.victims.size()) + " possible victim(s)");
  }
  card(out, "Step time (slowest rank)",
       "<span class=\"badge " + std::string(verdict_class(cmp.step_time.verdict)) + "\">" +
           to_string(cmp.step_time.verdict) + "</span>",
       num(cmp.step_time.baseline_ms, 1) + " → " + num(cmp.step_time.current_ms, 1) + " ms (" +
           num(cmp.step_time.ratio, 3) + "×)");
  if (cmp.rank_origin >= 0) {
    const auto& r = cmp.ranks[static_cast<std::size_t>(cmp.rank_origin)];
    card(out, "First rank regressed in own work",
         "rank " + std::to_string(r.rank) + " · " +
             html_escape(stage_label(r.stage, r.cohort, name_cohort)),
         num(r.ratio, 3) + "×, " + num(r.baseline_ms, 1) + " → " + num(r.current_ms, 1) + " ms");
  }
  card(out, "Rank-stage pairs regressed",
       cmp.per_rank ? std::to_string(cmp.ranks_regressed) : "n/a",
       cmp.per_rank ? "of " + std::to_string(cmp.rank_pairs_tested) + " tested"
                    : html_escape(cmp.per_rank_note));
  out += "</section>\n";

  // Verdict sentence(s).
  out += "<section id=\"verdicts\"><h2>Stages in pipeline order</h2>\n";
  if (cmp.origin >= 0) {
    const auto& s = cmp.stages[static_cast<std::size_t>(cmp.origin)];
    out += "<p class=\"callout\"><b>Origin: " + html_escape(label(s)) + "</b> regressed " +
           num(s.ratio, 3) + "× (interval " + num(s.ci_low, 3) + "–" + num(s.ci_high, 3) + "), +" +
           num(s.delta_ms, 2) + " ms per step for the median rank. Start there.";
    if (!cmp.victims.empty()) {
      std::vector<std::string> v;
      for (int i : cmp.victims)
        v.push_back(html_escape(label(cmp.stages[static_cast<std::size_t>(i)])));
      out += " Later regressed stages, possible victims: " + join(v) + ".";
    }
    out += "</p>\n";
  } else {
    out += "<p class=\"callout ok\">No stage regressed beyond " +
           num(100 * o.relative_threshold, 1) + "%.</p>\n";
  }
  if (!cmp.hint.empty())
    out += "<p class=\"callout\" id=\"hint\"><b>Hint:</b> " + html_escape(cmp.hint) + ".</p>\n";
  if (!cmp.unknown_before_origin.empty()) {
    std::vector<std::string> v;
    for (int i : cmp.unknown_before_origin)
      v.push_back(html_escape(label(cmp.stages[static_cast<std::size_t>(i)])));
    out += "<p class=\"note\">" + std::string(cmp.origin >= 0 ? "Earlier stages" : "Stages") +
           " without enough evidence (UNKNOWN): " + join(v) + ".</p>\n";
  }
  out +=
      "<table class=\"sortable\" id=\"verdict-table\"><thead><tr><th>stage</th><th>verdict</th>"
      "<th>ratio</th><th>interval</th><th>baseline ms</th><th>current ms</th><th>change</th>"
      "<th>p (Holm)</th><th>max ms (base → cur)</th><th>steps</th><th "
      "class=\"why\">why</th></tr></thead><tbody>\n";
  for (const auto& s : cmp.stages) {
    const char* row_class = s.role == StageComparison::Role::origin   ? " class=\"origin\""
                            : s.role == StageComparison::Role::victim ? " class=\"victim\""
                                                                      : "";
    std::string role;
    if (s.role == StageComparison::Role::origin) role = "<span class=\"role origin\">ORIGIN</span>";
    if (s.role == StageComparison::Role::victim)
      role = "<span class=\"role victim\">possible victim</span>";
    out += std::string("<tr") + row_class + " data-stage=\"" + html_escape(s.stage) + "\"><td>" +
           html_escape(label(s)) + role + "</td><td><span class=\"badge " +
           verdict_class(s.verdict) + "\">" + to_string(s.verdict) +
           "</span></td><td class=\"n\">" + num(s.ratio, 3) + "</td><td class=\"n\">" +
           (std::isfinite(s.ci_low) ? num(s.ci_low, 3) + "–" + num(s.ci_high, 3) : "–") +
           "</td><td class=\"n\">" + num(s.baseline_ms, 2) + "</td><td class=\"n\">" +
           num(s.current_ms, 2) + "</td><td class=\"n\" data-v=\"" + num(s.delta_ms, 4) + "\">" +
           (s.delta_ms >= 0 ? "+" : "") + num(s.delta_ms, 2) + " ms</td><td class=\"n\">" +
           p_text(s.p_adjusted) + "</td><td class=\"n\">" + num(s.baseline_max_ms, 2) + " → " +
           num(s.current_max_ms, 2) + "</td><td class=\"n\">" + std::to_string(s.baseline_steps) +
           " / " + std::to_string(s.current_steps) + "</td><td class=\"why\">" +
           html_escape(s.reason) + "</td></tr>\n";
  }
  out += "</tbody></table>\n";
  if (!cmp.only_in_baseline.empty() || !cmp.only_in_current.empty()) {
    std::vector<std::string> b, c;
    for (const auto& s : cmp.only_in_baseline) b.push_back(html_escape(s));
    for (const auto& s : cmp.only_in_current) c.push_back(html_escape(s));
    out += "<p class=\"note\">Not compared: only in the baseline: " +
           (b.empty() ? std::string("none") : join(b)) +
           "; only in the current run: " + (c.empty() ? std::string("none") : join(c)) + ".</p>\n";
  }

  // Forest plot of the ratios.
  {
    double lo = 1.0 - 2 * o.relative_threshold, hi = 1.0 + 2 * o.relative_threshold;
    for (const auto& s : cmp.stages) {
      for (double v : {s.ratio, s.ci_low, s.ci_high})
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
    }
    lo = std::max(0.0, lo - 0.02);
    hi = std::min(hi + 0.02, 5.0);
    const double W = 960, L = 200, R = 30, row = 26, T = 26;
    const double H = T + row * static_cast<double>(cmp.stages.size()) + 36;
    const auto sx = [&](double v) {
      return L + (std::clamp(v, lo, hi) - lo) / (hi - lo) * (W - L - R);
    };
    out += "<div class=\"chart\"><svg xmlns=\"http://www.w3.org/2000/svg\" id=\"forest\" width=\"" +
           px(W) + "\" height=\"" + px(H) + "\" viewBox=\"0 0 " + px(W) + " " + px(H) +
           "\" role=\"img\" aria-label=\"ratio current/baseline per stage\">\n";
    out += "<rect x=\"" + px(sx(1 - o.relative_threshold)) + "\" y=\"" + px(T - 6) + "\" width=\"" +
           px(sx(1 + o.relative_threshold) - sx(1 - o.relative_threshold)) + "\" height=\"" +
           px(row * static_cast<double>(cmp.stages.size()) + 6) + "\" fill=\"#eef5ea\"/>\n";
    out += "<line x1=\"" + px(sx(1)) + "\" x2=\"" + px(sx(1)) + "\" y1=\"" + px(T - 10) +
           "\" y2=\"" + px(H - 30) + "\" stroke=\"#5f6368\"/>\n";
    for (double t : nice_ticks(lo, hi, 6)) {
      out += "<text x=\"" + px(sx(t)) + "\" y=\"" + px(H - 14) +
             "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#5f6368\">" + num(t, 2) +
             "×</text>";
    }
    out += "<text x=\"" + px(sx(1 + o.relative_threshold)) + "\" y=\"" + px(T - 12) +
           "\" font-size=\"11\" fill=\"#4d9221\" text-anchor=\"middle\">±" +
           num(100 * o.relative_threshold, 0) + "%</text>\n";
    for (std::size_t i = 0; i < cmp.stages.size(); ++i) {
      const auto& s = cmp.stages[i];
      const double y = T + row * (static_cast<double>(i) + 0.5);
      const std::string colour = verdict_colour(s.verdict);
      out += "<g class=\"forest-row\"><title>" + html_escape(label(s)) + ": " +
             to_string(s.verdict) + ", " + html_escape(s.reason) + "</title>";
      out += "<text x=\"" + px(L - 10) + "\" y=\"" + px(y + 4) +
             "\" text-anchor=\"end\" font-size=\"12\"" +
             (s.role == StageComparison::Role::origin ? " font-weight=\"700\" fill=\"#8a5a00\">"
                                                      : " fill=\"#1d1d1f\">") +
             html_escape(label(s)) + (s.role == StageComparison::Role::origin ? " (origin)" : "") +
             "</text>";
      if (std::isfinite(s.ci_low) && std::isfinite(s.ci_high))
        out += "<line x1=\"" + px(sx(s.ci_low)) + "\" x2=\"" + px(sx(s.ci_high)) + "\" y1=\"" +
               px(y) + "\" y2=\"" + px(y) + "\" stroke=\"" + colour + "\" stroke-width=\"3\"/>";
      if (std::isfinite(s.ratio))
        out += "<circle cx=\"" + px(sx(s.ratio)) + "\" cy=\"" + px(y) + "\" r=\"5\" fill=\"" +
               colour + "\"/>";
      out += "</g>\n";
    }
    out +=
        "</svg></div>\n<p class=\"note\">Ratio current/baseline of the per-step median over "
        "ranks, with its interval; the green band is the ±" +
        num(100 * o.relative_threshold, 0) + "% within which a change does not count.</p>\n";
  }
  out += "</section>\n";

  // Step time of both runs.
  out += "<section id=\"steptime\"><h2>Step time, both runs</h2>\n";
  {
    const auto series = [](const RunProfile& p) {
      std::vector<std::pair<double, double>> v;
      const auto& st = p.step_time();
      for (std::size_t i = 0; i < st.window.size(); ++i) {
        const std::int64_t step = p.step_of(st.window[i]);
        if (step >= 0) v.emplace_back(static_cast<double>(step), st.max[i]);
      }
      return downsample(v, 600);
    };
    Line b{"baseline (slowest rank)", "#5f6368", true, series(baseline), {}};
    Line c{"current (slowest rank)", "#b2182b", false, series(current), {}};
    std::vector<Marker> markers;
    if (cmp.current.warmup > 0 && !c.points.empty()) {
      const auto& st = current.step_time();
      std::int64_t step = -1;
      for (std::size_t i = 0; i < st.window.size(); ++i)
        if (st.window[i] >= static_cast<std::uint32_t>(cmp.current.warmup)) {
          step = current.step_of(st.window[i]);
          break;
        }
      if (step >= 0)
        markers.push_back({static_cast<double>(step), "warm-up ends (current)", "#5f6368", false});
    }
    out += line_chart({b, c}, markers, "ms per step", "step time of both runs");
    out += "<p class=\"note\">Step time: " + html_escape(cmp.step_time.reason) + ".</p>\n";
  }
  out += "</section>\n";

  // Per rank.
  out += "<section id=\"per-rank\"><h2>Per rank</h2>\n";
  if (!cmp.per_rank) {
    out += "<p class=\"callout\">" + html_escape(cmp.per_rank_note) + ".</p>\n";
  } else {
    out += "<p class=\"note\">" + html_escape(cmp.per_rank_note) + ": " +
           std::to_string(cmp.ranks_regressed) + " regressed, " +
           std::to_string(cmp.ranks_improved) +
           " improved. Each cell is the ratio of the rank's own median time (current / "
           "baseline); a black border marks REGRESSED.</p>\n";
    std::vector<std::string> stage_keys;
    for (const auto& s : cmp.stages) stage_keys.push_back(s.cohort + '\x1f' + s.stage);
    std::map<int, std::vector<const RankComparison*>> by_rank;
    for (const auto& r : cmp.ranks) by_rank[r.rank].push_back(&r);
    std::vector<int> ranks;
    for (const auto& [r, v] : by_rank) ranks.push_back(r);
    const std::size_t total = ranks.size();
    constexpr std::size_t kMaxRows = 64;
    if (ranks.size() > kMaxRows) {
      std::map<int, double> worst;
      for (const auto& [r, v] : by_rank) {
        double w = 0;
        for (const auto* x : v)
          w = std::max(w, (x->verdict == Verdict::regressed ? 100.0 : 0.0) + x->ratio);
        worst[r] = w;
      }
      std::sort(ranks.begin(), ranks.end(),
                [&](int a, int b) { return worst[a] != worst[b] ? worst[a] > worst[b] : a < b; });
      ranks.resize(kMaxRows);
      std::sort(ranks.begin(), ranks.end());
      out += "<p class=\"note\">Showing " + std::to_string(kMaxRows) + " of " +
             std::to_string(total) +
             " ranks: the regressed ones first, then the largest ratios.</p>\n";
    }
    std::vector<std::string> cols, rows;
    for (const auto& s : cmp.stages) cols.push_back(label(s));
    std::vector<std::vector<HeatCell>> cells;
    for (int r : ranks) {
      rows.push_back("rank " + std::to_string(r));
      std::vector<HeatCell> row(cmp.stages.size());
      for (const auto* x : by_rank[r]) {
        const auto k =
            std::find(stage_keys.begin(), stage_keys.end(), x->cohort + '\x1f' + x->stage);
        if (k == stage_keys.end()) continue;
        HeatCell& h = row[static_cast<std::size_t>(k - stage_keys.begin())];
        h.value = x->ratio;
        h.fill = ratio_fill(x->ratio);
        h.intensity =
            std::isfinite(x->ratio) ? std::clamp(std::fabs(x->ratio - 1.0) / 0.5, 0.0, 1.0) : 0.0;
        h.text = num(x->ratio, 2);
        h.outline = x->verdict == Verdict::regressed;
        h.tip = "rank " + std::to_string(r) + " · " + x->stage + ": " + to_string(x->verdict) +
                ", " + num(x->baseline_ms, 2) + " → " + num(x->current_ms, 2) + " ms (" +
                num(x->ratio, 3) + "×), p " +
                (std::isfinite(x->p_adjusted) ? num(x->p_adjusted, 4) : "n/a") +
                " (Holm); the stage's median rank: " + to_string(x->stage_verdict);
      }
      cells.push_back(std::move(row));
    }
    if (!rows.empty()) {
      out += heatmap(rows, cols, cells, "ratio current/baseline per rank and stage");
      out += "<div id=\"cell-info\">Point at a cell for details.</div>\n";
    }
    std::vector<const RankComparison*> reg;
    for (const auto& r : cmp.ranks)
      if (r.verdict == Verdict::regressed) reg.push_back(&r);
    // Own work first (a wait in communication is evidence about someone else), then the pairs
    // whose stage did not regress for the median rank, then by ratio.
    std::stable_sort(reg.begin(), reg.end(), [](const auto* a, const auto* b) {
      const bool wa = a->kind == StageKind::communication, wb = b->kind == StageKind::communication;
      if (wa != wb) return wb;
      const bool ma = a->stage_verdict == Verdict::regressed,
                 mb = b->stage_verdict == Verdict::regressed;
      if (ma != mb) return mb;
      return a->ratio > b->ratio;
    });
    if (!reg.empty()) {
      out +=
          "<table class=\"sortable\" id=\"rank-table\"><thead><tr><th>rank</th><th>stage</th>"
          "<th>ratio</th><th>interval</th><th>baseline ms</th><th>current ms</th><th>change</th>"
          "<th>p (Holm)</th><th>stage median rank</th></tr></thead><tbody>\n";
      for (std::size_t i = 0; i < reg.size() && i < 100; ++i) {
        const auto* x = reg[i];
        out += "<tr><td class=\"n\">" + std::to_string(x->rank) + "</td><td>" +
               html_escape(stage_label(x->stage, x->cohort, name_cohort)) +
               "</td><td class=\"n\">" + num(x->ratio, 3) + "</td><td class=\"n\">" +
               num(x->ci_low, 3) + "–" + num(x->ci_high, 3) + "</td><td class=\"n\">" +
               num(x->baseline_ms, 2) + "</td><td class=\"n\">" + num(x->current_ms, 2) +
               "</td><td class=\"n\">+" + num(x->delta_ms, 2) + " ms</td><td class=\"n\">" +
               p_text(x->p_adjusted) + "</td><td><span class=\"badge " +
               verdict_class(x->stage_verdict) + "\">" + to_string(x->stage_verdict) +
               "</span></td></tr>\n";
      }
      out += "</tbody></table>\n";
      if (reg.size() > 100)
        out += "<p class=\"note\">… and " + std::to_string(reg.size() - 100) + " more.</p>\n";
    }
  }
  out += "</section>\n";
  page_end(out);
  return out;
}

}  // namespace laggard
