// The run report (render_run_report): one function per section of the page, in page order. A
// new section is a function of the same signature and a line in kSections.
#include <algorithm>
#include <map>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "laggard/html_report.hpp"
#include "sinks/html/charts.hpp"
#include "sinks/html/format.hpp"
#include "sinks/html/page.hpp"

namespace laggard {
namespace {

using namespace html;

// The header: the run, its size, the rule.
void header(std::string& out, const RunSummary& sum, const RunReportData& /*data*/,
            const RunReportInput& input) {
  const DetectorOptions& opt = input.options;
  out += "<header><h1>laggard report</h1><p class=\"sub\"><span class=\"mono\">" +
         html_escape(input.run_dir) + "</span> · " + std::to_string(sum.ranks) +
         " ranks (world size " + std::to_string(sum.world_size) + ") · " +
         std::to_string(sum.windows) + " sampled steps (" + std::to_string(sum.first_step) + "–" +
         std::to_string(sum.last_step) + ") · " + std::to_string(sum.samples) +
         " samples</p><p class=\"sub\">rule: " + html_escape(describe_rule(opt)) +
         "</p></header>\n";
}

// The summary cards.
void cards(std::string& out, const RunSummary& sum, const RunReportData& /*data*/,
           const RunReportInput& /*input*/) {
  out += "<section class=\"cards\">\n";
  {
    std::string detail;
    for (std::size_t i = 0; i < sum.stragglers.size() && i < 3; ++i) {
      const auto& s = sum.stragglers[i];
      if (!detail.empty()) detail += "; ";
      detail += "rank " + std::to_string(s.rank) + " in " + html_escape(s.stage) + " (+" +
                num(s.cost_ms, 1) + " ms/step)";
    }
    if (sum.stragglers.size() > 3) detail += "; …";
    card(out, "Confirmed stragglers", std::to_string(sum.stragglers.size()),
         detail.empty() ? "none" : detail);
  }
  card(out, "Likely bottleneck",
       sum.likely_bottleneck.empty() ? "none" : html_escape(sum.likely_bottleneck),
       sum.likely_bottleneck.empty()
           ? "no persistent finding"
           : std::to_string(sum.bottleneck_windows.at(sum.likely_bottleneck)) + " of " +
                 std::to_string(sum.windows) + " windows");
  card(out, "What-if saving", num(sum.mean_whatif_saving_ms, 1) + " ms/step",
       sum.mean_step_ms > 0 ? num(100.0 * sum.mean_whatif_saving_ms / sum.mean_step_ms, 1) +
                                  "% of the " + num(sum.mean_step_ms, 1) + " ms step"
                            : std::string());
  if (sum.step_time_onset)
    card(out, "Step time slower since", "step " + std::to_string(*sum.step_time_onset),
         num(sum.step_time_before_ms, 1) + " ms before, " + num(sum.step_time_since_ms, 1) +
             " ms since");
  else
    card(out, "Step time onset", "none", "no persistent rise of the step time");
  out += "</section>\n";
}

// The confirmed stragglers, with their evidence.
void stragglers(std::string& out, const RunSummary& sum, const RunReportData& /*data*/,
                const RunReportInput& input) {
  const DetectorOptions& opt = input.options;
  out += "<section id=\"stragglers\"><h2>Confirmed stragglers</h2>\n";
  if (sum.stragglers.empty()) {
    out += "<p class=\"callout ok\">No rank was slow in its own work in " +
           std::to_string(opt.confirm_k) + " of " + std::to_string(opt.confirm_n) +
           " consecutive windows.</p>\n";
  } else {
    out +=
        "<table class=\"sortable\"><thead><tr><th>rank</th><th>host</th><th>cohort</th>"
        "<th>stage</th><th>cost per step</th><th>slow in windows</th><th>typical slowdown</th>"
        "<th>last ms vs ref</th>"
        "<th>first flagged</th><th>confirmed</th><th>since step (onset)</th></tr></thead><tbody>\n";
    for (const auto& s : sum.stragglers) {
      out += "<tr><td class=\"n\">" + std::to_string(s.rank) + "</td><td>" + html_escape(s.host) +
             "</td><td>" + html_escape(s.cohort) + "</td><td>" + html_escape(s.stage) +
             "</td><td class=\"n\" data-v=\"" + num(s.cost_ms, 3) + "\">+" + num(s.cost_ms, 1) +
             " ms (" + num(100.0 * s.cost_share, 1) + "%)" +
             "</td><td class=\"n\" data-v=\"" + std::to_string(s.windows_flagged) + "\">" +
             std::to_string(s.windows_flagged) + " of " + std::to_string(s.windows_seen) +
             "</td><td class=\"n\">" + num(s.typical_slowdown, 2) +
             "×</td><td class=\"n\" data-v=\"" + num(s.last_ms, 3) + "\">" + num(s.last_ms, 1) +
             " vs " + num(s.last_ref_ms, 1) + "</td><td class=\"n\">" +
             std::to_string(s.first_flagged_step) + "</td><td class=\"n\">" +
             std::to_string(s.confirmed_step) + "</td><td class=\"n\">" +
             (s.onset_step ? std::to_string(*s.onset_step) : std::string("–")) + "</td></tr>\n";
    }
    out +=
        "</tbody></table>\n<p class=\"note\">Evidence: slow in <i>k</i> of <i>n</i> "
        "windows is the detector's count of windows in which the rank's own time met the rule; "
        "the slowdown is the median of t / ref over those windows; the cost is the median of "
        "t - ref, what every rank of a synchronous job waits for it each step, and its share of "
        "the cohort's median step time (rows: costliest first); the onset is where a CUSUM "
        "on log(t / ref) found the shift to begin.</p>\n";
  }
  out += "</section>\n";
}

// The triage chain, in order, each layer with its status and findings, the first failing one
// marked as where to look (docs/howto/triage.md).
void triage_chain(std::string& out, const RunSummary& /*sum*/, const RunReportData& /*data*/,
                  const RunReportInput& input) {
  if (!input.triage) return;
  const Diagnosis& d = *input.triage;
  out += "<section id=\"triage\"><h2>Triage chain</h2>\n";
  if (d.first_failing < 0) {
    out += "<p class=\"callout ok\">No layer failed.</p>\n";
  } else {
    const DiagnosisLayer& l = d.layers[static_cast<std::size_t>(d.first_failing)];
    out += "<p class=\"callout\">Look first at <b>" + html_escape(l.name) + "</b>" +
           (l.findings.empty() ? std::string()
                               : ": " + html_escape(l.findings.front().text)) +
           ". Findings of later layers may be symptoms of it.</p>\n";
  }
  out += "<table><thead><tr><th>#</th><th>layer</th><th>status</th><th>what was checked</th>"
         "<th>findings</th></tr></thead><tbody>\n";
  for (std::size_t i = 0; i < d.layers.size(); ++i) {
    const DiagnosisLayer& l = d.layers[i];
    const char* badge = l.status == DiagnosisLayer::Status::fail   ? "v-regressed"
                        : l.status == DiagnosisLayer::Status::pass ? "v-same"
                                                                   : "v-unknown";
    const char* label = l.status == DiagnosisLayer::Status::fail   ? "fail"
                        : l.status == DiagnosisLayer::Status::pass ? "pass"
                                                                   : "not measured";
    out += "<tr" + std::string(static_cast<int>(i) == d.first_failing ? " class=\"origin\"" : "") +
           " data-layer=\"" + html_escape(l.name) + "\"><td class=\"n\">" + std::to_string(i + 1) +
           "</td><td>" + html_escape(l.name) + "</td><td><span class=\"badge " + badge + "\">" +
           label + "</span></td><td>" + html_escape(l.summary) + "</td><td>";
    if (l.findings.empty()) out += "–";
    else {
      out += "<ul>";
      for (const DiagnosisFinding& f : l.findings)
        out += "<li>" + html_escape(f.text) +
               (f.explained_by_stragglers ? " <i>(a wait: see stragglers)</i>" : "") + "</li>";
      out += "</ul>";
    }
    out += "</td></tr>\n";
  }
  out += "</tbody></table>\n</section>\n";
}

// The ranks × stages heatmap of the median t / ref (at most 64 ranks).
void slowdown_heatmap(std::string& out, const RunSummary& sum, const RunReportData& data,
                      const RunReportInput& /*input*/) {
  out += "<section id=\"heatmap\"><h2>Slowdown by rank and stage</h2>\n";
  {
    const auto& stages = data.stages();
    std::map<int, std::vector<const RunReportData::Cell*>> by_rank;
    for (const auto& c : data.cells()) by_rank[c.rank].push_back(&c);
    std::vector<int> ranks;
    for (const auto& [r, v] : by_rank) ranks.push_back(r);
    const std::size_t total = ranks.size();
    constexpr std::size_t kMaxRows = 64;
    if (ranks.size() > kMaxRows) {
      // Keep the confirmed stragglers, then the ranks with the largest median slowdown.
      std::map<int, double> worst;
      for (const auto& [r, v] : by_rank) {
        double w = 0.0;
        for (const auto* c : v)
          if (stages[c->stage].kind != StageKind::communication)
            w = std::max(w, c->slowdown.value());
        worst[r] = w;
      }
      for (const auto& s : sum.stragglers) worst[s.rank] = 1e9;
      std::sort(ranks.begin(), ranks.end(),
                [&](int a, int b) { return worst[a] != worst[b] ? worst[a] > worst[b] : a < b; });
      ranks.resize(kMaxRows);
      std::sort(ranks.begin(), ranks.end());
    }
    // Columns: every stage in pipeline order, or, past kMaxColumns, the stages of confirmed
    // stragglers, then those flagged, then those with the largest median slowdown (a page of
    // 128k stage columns was 69 MB).
    std::vector<std::uint32_t> shown = data.pipeline_order();
    const std::size_t total_stages = shown.size();
    constexpr std::size_t kMaxColumns = 64;
    if (shown.size() > kMaxColumns) {
      std::vector<double> worst(stages.size(), 0.0);
      std::vector<int> tier(stages.size(), 0);
      for (const auto& c : data.cells()) {
        const double v = c.slowdown.value();
        if (std::isfinite(v)) worst[c.stage] = std::max(worst[c.stage], v);
        if (c.flagged > 0) tier[c.stage] = std::max(tier[c.stage], 1);
      }
      std::unordered_map<std::string, std::uint32_t> index;
      for (std::uint32_t i = 0; i < stages.size(); ++i) index.emplace(stages[i].name, i);
      for (const auto& s : sum.stragglers) {
        const auto it = index.find(s.stage);
        if (it != index.end()) tier[it->second] = 2;
      }
      std::vector<std::size_t> position(stages.size(), 0);
      for (std::size_t i = 0; i < shown.size(); ++i) position[shown[i]] = i;
      std::vector<std::uint32_t> ranked = shown;
      std::partial_sort(ranked.begin(), ranked.begin() + kMaxColumns, ranked.end(),
                        [&](std::uint32_t a, std::uint32_t b) {
                          if (tier[a] != tier[b]) return tier[a] > tier[b];
                          if (worst[a] != worst[b]) return worst[a] > worst[b];
                          return position[a] < position[b];
                        });
      ranked.resize(kMaxColumns);
      std::sort(ranked.begin(), ranked.end(),
                [&](std::uint32_t a, std::uint32_t b) { return position[a] < position[b]; });
      shown.swap(ranked);
    }
    std::vector<std::int32_t> column(stages.size(), -1);
    for (std::size_t i = 0; i < shown.size(); ++i) column[shown[i]] = static_cast<std::int32_t>(i);
    std::vector<std::string> rows, cols;
    for (std::uint32_t i : shown)
      cols.push_back(stages[i].name +
                     (stages[i].kind == StageKind::communication ? " (wait)" : ""));
    std::vector<std::vector<HeatCell>> cells;
    for (int r : ranks) {
      rows.push_back(who(r, data.host_of(r)));
      std::vector<HeatCell> row(shown.size());
      for (const auto* c : by_rank[r]) {
        if (column[c->stage] < 0) continue;
        HeatCell& h = row[static_cast<std::size_t>(column[c->stage])];
        const double v = c->slowdown.value();
        const bool waiting = stages[c->stage].kind == StageKind::communication;
        h.value = v;
        h.fill = slowdown_fill(v, waiting);
        h.intensity = std::clamp((v - 1.0) / 0.5, 0.0, 1.0);
        h.text = num(v, 2);
        h.tip = "rank " + std::to_string(r) +
                (data.host_of(r).empty() ? "" : " (" + data.host_of(r) + ")") + " · " +
                stages[c->stage].name + ": median " + num(v, 2) + "× the cohort reference, max " +
                num(c->max_slowdown, 2) + "×, flagged in " + std::to_string(c->flagged) + " of " +
                std::to_string(c->slowdown.count()) + " windows" +
                (waiting ? " (waiting: evidence about others)" : "");
      }
      cells.push_back(std::move(row));
    }
    if (rows.empty()) {
      out += "<p class=\"note\">No stage times.</p>\n";
    } else {
      if (total > ranks.size())
        out += "<p class=\"note\">Showing " + std::to_string(ranks.size()) + " of " +
               std::to_string(total) +
               " ranks: the confirmed stragglers and the ranks with the largest slowdown.</p>\n";
      if (total_stages > shown.size())
        out += "<p class=\"note\">Showing " + std::to_string(shown.size()) + " of " +
               std::to_string(total_stages) + " stages (" +
               std::to_string(total_stages - shown.size()) +
               " more not drawn): those of confirmed stragglers, then those flagged, then those "
               "with the largest slowdown, in pipeline order.</p>\n";
      out += heatmap(rows, cols, cells, "slowdown of each rank in each stage");
      out += "<div class=\"legend\"><span><span class=\"swatch\" style=\"background:" +
             slowdown_fill(1.0, false) +
             "\"></span>1× reference</span><span><span class=\"swatch\" style=\"background:" +
             slowdown_fill(1.25, false) +
             "\"></span>1.25×</span><span><span class=\"swatch\" style=\"background:" +
             slowdown_fill(1.5, false) +
             "\"></span>≥ 1.5× (own work)</span><span><span class=\"swatch\" style=\"background:" +
             slowdown_fill(1.5, true) +
             "\"></span>≥ 1.5× in communication: waiting for someone else</span></div>\n";
      out +=
          "<div id=\"cell-info\">Median over the sampled steps of t / ref, ref being the "
          "cohort's reference in that step. Point at a cell for details.</div>\n";
    }
  }
  out += "</section>\n";
}

// The step time over steps, the detected onsets marked.
void step_time(std::string& out, const RunSummary& sum, const RunReportData& data,
               const RunReportInput& /*input*/) {
  out += "<section id=\"steptime\"><h2>Step time</h2>\n";
  {
    Line job{"slowest rank (the job's step time)", "#b2182b", false, {}, {}};
    Line med{"median rank", "#5f6368", true, {}, {}};
    for (const auto& p : data.points()) {
      // In doubles: the sum of two steps near 2^63 overflows an int64 (undefined behaviour).
      const double x = 0.5 * (static_cast<double>(p.first_step) + static_cast<double>(p.last_step));
      // A sum of times near the largest double overflows: a mean lies within [min, max].
      job.points.emplace_back(x, std::clamp(p.job_sum / p.windows, p.job_min, p.job_max));
      med.points.emplace_back(x, std::min(p.median_sum / p.windows, p.job_max));
      if (p.windows > 1) job.band.push_back({x, {p.job_min, p.job_max}});
    }
    std::vector<Marker> markers;
    if (sum.step_time_onset)
      markers.push_back({static_cast<double>(*sum.step_time_onset),
                         "job slower since step " + std::to_string(*sum.step_time_onset), "#b2182b",
                         true});
    for (const auto& s : sum.stragglers)
      if (s.onset_step)
        markers.push_back({static_cast<double>(*s.onset_step),
                           "rank " + std::to_string(s.rank) + " " + s.stage + " since step " +
                               std::to_string(*s.onset_step),
                           "#8a5a00", false});
    out += line_chart({job, med}, markers, "ms per step", "step time over steps");
    if (!data.points().empty() && data.points().front().windows > 1)
      out += "<p class=\"note\">Long run: each point averages " +
             std::to_string(data.points().front().windows) +
             " sampled steps; the band spans their minimum and maximum.</p>\n";
  }
  out += "</section>\n";
}

// The slow hosts, if any.
void slow_hosts(std::string& out, const RunSummary& sum, const RunReportData& /*data*/,
                const RunReportInput& /*input*/) {
  if (!sum.slow_hosts.empty()) {
    out +=
        "<section id=\"hosts\"><h2>Slow hosts</h2><p class=\"note\">Every rank of the host was "
        "slow in the same stage: look at the host (thermals, power, a noisy neighbour, the "
        "NIC), not one GPU.</p><table class=\"sortable\"><thead><tr><th>host</th><th>cohort</th>"
        "<th>stage</th><th>ranks</th><th>cost per step</th><th>windows</th><th>typical "
        "slowdown</th></tr></thead><tbody>\n";
    for (const auto& h : sum.slow_hosts) {
      std::string ranks;
      for (int r : h.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      out += "<tr><td>" + html_escape(h.host) + "</td><td>" + html_escape(h.cohort) + "</td><td>" +
             html_escape(h.stage) + "</td><td>" + ranks + "</td><td class=\"n\" data-v=\"" +
             num(h.cost_ms, 3) + "\">+" + num(h.cost_ms, 1) + " ms (" +
             num(100.0 * h.cost_share, 1) + "%)</td><td class=\"n\">" + std::to_string(h.windows) + "</td><td class=\"n\">" + num(h.typical_slowdown, 2) +
             "×</td></tr>\n";
    }
    out += "</tbody></table></section>\n";
  }
}

// The waiting ranks.
void waiting(std::string& out, const RunSummary& sum, const RunReportData& /*data*/,
             const RunReportInput& /*input*/) {
  out +=
      "<section id=\"waiting\"><h2>Waiting only</h2><p class=\"note\">Excess time spent "
      "waiting in communication: evidence that these ranks wait for someone else, not a verdict "
      "on them.</p>\n";
  if (sum.waiting.empty()) {
    out += "<p>none</p>\n";
  } else {
    out +=
        "<table class=\"sortable\"><thead><tr><th>rank</th><th>host</th><th>cohort</th>"
        "<th>stage</th><th>windows</th><th>typical excess</th></tr></thead><tbody>\n";
    for (const auto& w : sum.waiting)
      out += "<tr><td class=\"n\">" + std::to_string(w.rank) + "</td><td>" + html_escape(w.host) +
             "</td><td>" + html_escape(w.cohort) + "</td><td>" + html_escape(w.stage) +
             "</td><td class=\"n\">" + std::to_string(w.windows) + "</td><td class=\"n\">+" +
             num(w.typical_excess_ms, 1) + " ms</td></tr>\n";
    out += "</tbody></table>\n";
  }
  out += "</section>\n";
}

// What reading the run met.
void input_stats(std::string& out, const RunSummary& /*sum*/, const RunReportData& /*data*/,
                 const RunReportInput& input) {
  const RunStats& st = input.stats;
  out += "<section id=\"input\"><h2>Input</h2><p>" + std::to_string(st.files) + " files, " +
         std::to_string(st.samples) + " samples, " + std::to_string(st.malformed) +
         " malformed lines, " + std::to_string(st.duplicates) + " duplicates, " +
         std::to_string(st.out_of_order) + " out-of-order lines skipped.</p>\n";
  if (!st.errors.empty()) {
    out += "<ul class=\"errors mono\">";
    for (const auto& e : st.errors) out += "<li>" + html_escape(e.message()) + "</li>";
    if (st.malformed > st.errors.size())
      out += "<li>… and " + std::to_string(st.malformed - st.errors.size()) + " more</li>";
    out += "</ul>\n";
  }
  out += "</section>\n";
}

using Section = void (*)(std::string& out, const RunSummary& sum, const RunReportData& data,
                         const RunReportInput& input);
constexpr Section kSections[] = {header,           cards,     triage_chain, stragglers,
                                 slowdown_heatmap, step_time, slow_hosts,   waiting,
                                 input_stats};

}  // namespace

std::string render_run_report(const RunSummary& sum, const RunReportData& data,
                              const RunReportInput& input) {
  std::string out;
  out.reserve(64 << 10);
  page_begin(out, "laggard report: " + input.run_dir);
  for (Section section : kSections) section(out, sum, data, input);
  page_end(out);
  return out;
}

}  // namespace laggard
