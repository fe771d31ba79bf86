// The first divergent step of two runs (include/laggard/divergence.hpp): both runs are read in
// step order side by side; at each step both hold, each rank both hold, each value both recorded
// is compared. Windows before the divergence are kept only as a short history for the context.
#include "laggard/divergence.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <set>

#include "laggard/jsonl.hpp"

namespace laggard {

bool same_value(double a, double b, double rtol) noexcept {
  if (rtol <= 0.0) {
    if (std::isnan(a) && std::isnan(b)) return true;  // the log keeps no NaN payload
    std::uint64_t x = 0, y = 0;
    std::memcpy(&x, &a, sizeof x);
    std::memcpy(&y, &b, sizeof y);
    return x == y;
  }
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (a == b) return true;  // equal infinities
  if (!std::isfinite(a) || !std::isfinite(b)) return false;
  return std::fabs(a - b) <= rtol * std::max(std::fabs(a), std::fabs(b));
}

namespace {

const StepSample* sample_of(const Window& w, int rank) {
  for (const StepSample& s : w.samples)
    if (s.rank == rank) return &s;
  return nullptr;
}

// One run read ahead by a window, with the names it has recorded.
struct Side {
  RunSource& source;
  Window window;
  bool has = false;
  std::set<std::string> names;

  explicit Side(RunSource& s) : source(s) { advance(); }
  void advance() {
    has = source.next(window);
    if (has)
      for (const StepSample& s : window.samples)
        for (const NamedValue& v : s.values) names.insert(v.name);
  }
};

// The window's samples in rank order (reusing `out`'s storage).
void by_rank(const Window& w, std::vector<const StepSample*>& out) {
  out.clear();
  for (const StepSample& s : w.samples) out.push_back(&s);
  std::sort(out.begin(), out.end(),
            [](const StepSample* x, const StepSample* y) { return x->rank < y->rank; });
}

void keep(std::deque<Window>& history, const Window& w, int limit) {
  if (limit <= 0) return;
  history.push_back(w);
  while (history.size() > static_cast<std::size_t>(limit)) history.pop_front();
}

}  // namespace

DivergenceResult find_divergence(RunSource& a, RunSource& b, const DivergenceOptions& options) {
  if (!(options.rtol >= 0.0) || !std::isfinite(options.rtol))
  {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", options.rtol);
    throw InputError(std::string("the relative tolerance must be a finite number >= 0, not ") +
                     buf);
  }
  DivergenceResult out;
  Side sa(a), sb(b);
  std::deque<Window> history_a, history_b;  // the windows before the current step, per side
  const int context = std::max(0, options.context);
  std::size_t steps_in_common = 0;
  std::vector<const StepSample*> ordered_a, ordered_b;

  while (sa.has && sb.has) {
    if (sa.window.step < sb.window.step) {
      ++out.steps_only_a;
      keep(history_a, sa.window, context);
      sa.advance();
      continue;
    }
    if (sb.window.step < sa.window.step) {
      ++out.steps_only_b;
      keep(history_b, sb.window, context);
      sb.advance();
      continue;
    }
    ++steps_in_common;
    bool compared = false;
    const Window& wa = sa.window;
    const Window& wb = sb.window;
    // Both windows by rank, walked together: linear in ranks, not a scan of one per rank of
    // the other.
    by_rank(wa, ordered_a);
    by_rank(wb, ordered_b);
    std::size_t ia = 0, ib = 0;
    while (ia < ordered_a.size() || ib < ordered_b.size()) {
      if (ib == ordered_b.size() ||
          (ia < ordered_a.size() && ordered_a[ia]->rank < ordered_b[ib]->rank)) {
        ++out.ranks_only;
        ++ia;
        continue;
      }
      if (ia == ordered_a.size() || ordered_b[ib]->rank < ordered_a[ia]->rank) {
        ++out.ranks_only;
        ++ib;
        continue;
      }
      const StepSample* pa = ordered_a[ia++];
      const StepSample* pb = ordered_b[ib++];
      for (const NamedValue& v : pa->values) {
        if (!options.value.empty() && v.name != options.value) continue;
        const NamedValue* w = pb->find_value(v.name);
        if (w == nullptr) continue;
        compared = true;
        ++out.values_compared;
        if (same_value(v.value, w->value, options.rtol)) continue;
        out.at_step.push_back({pa->rank, v.name, v.value, w->value});
      }
    }
    if (compared) ++out.steps_compared;
    if (!out.at_step.empty()) {
      const auto& first = out.at_step.front();
      out.diverged = true;
      out.step = wa.step;
      out.rank = first.rank;
      out.value = first.value;
      out.a = first.a;
      out.b = first.b;
      break;
    }
    keep(history_a, sa.window, context);
    keep(history_b, sb.window, context);
    sa.advance();
    sb.advance();
  }

  if (out.diverged) {
    // The context: the history, this step, and up to `context` steps after it on each side.
    std::vector<Window> wins_a(history_a.begin(), history_a.end());
    std::vector<Window> wins_b(history_b.begin(), history_b.end());
    wins_a.push_back(sa.window);
    wins_b.push_back(sb.window);
    for (int i = 0; i < context; ++i) {
      sa.advance();
      if (!sa.has) break;
      wins_a.push_back(sa.window);
    }
    for (int i = 0; i < context; ++i) {
      sb.advance();
      if (!sb.has) break;
      wins_b.push_back(sb.window);
    }
    std::set<std::int64_t> steps;
    for (const Window& w : wins_a) steps.insert(w.step);
    for (const Window& w : wins_b) steps.insert(w.step);
    for (std::int64_t step : steps) {
      DivergenceContext c;
      c.step = step;
      for (const Window& w : wins_a)
        if (w.step == step)
          if (const StepSample* s = sample_of(w, out.rank)) c.in_a = true, c.a = *s;
      for (const Window& w : wins_b)
        if (w.step == step)
          if (const StepSample* s = sample_of(w, out.rank)) c.in_b = true, c.b = *s;
      if (c.in_a || c.in_b) out.around.push_back(std::move(c));
    }
    // Keep `context` steps on each side of the divergent one.
    const auto at = std::find_if(out.around.begin(), out.around.end(),
                                 [&](const DivergenceContext& c) { return c.step == out.step; });
    const std::ptrdiff_t i = at - out.around.begin();
    const std::ptrdiff_t lo = std::max<std::ptrdiff_t>(0, i - context);
    const std::ptrdiff_t hi =
        std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(out.around.size()), i + context + 1);
    out.around = std::vector<DivergenceContext>(out.around.begin() + lo, out.around.begin() + hi);
  } else {
    // Count what is left of the longer run.
    while (sa.has) {
      ++out.steps_only_a;
      sa.advance();
    }
    while (sb.has) {
      ++out.steps_only_b;
      sb.advance();
    }
  }

  for (const std::string& n : sa.names)
    if (!sb.names.count(n)) out.values_only_a.push_back(n);
  for (const std::string& n : sb.names)
    if (!sa.names.count(n)) out.values_only_b.push_back(n);

  if (!out.diverged) {
    if (steps_in_common == 0)
      throw InputError("the runs have no step in common (" + std::to_string(out.steps_only_a) +
                       " steps in the first only, " + std::to_string(out.steps_only_b) +
                       " in the second only)");
    if (sa.names.empty() || sb.names.empty())
      throw InputError(std::string(sa.names.empty() && sb.names.empty() ? "neither run recorded"
                                   : sa.names.empty() ? "the first run recorded no"
                                                      : "the second run recorded no") +
                       " values (an.record(name, value) writes them into the samples' "
                       "\"values\"); nothing to compare");
    if (!options.value.empty() && !sa.names.count(options.value) &&
        !sb.names.count(options.value)) {
      std::string seen;
      std::set<std::string> all(sa.names);
      all.insert(sb.names.begin(), sb.names.end());
      for (const std::string& n : all) seen += (seen.empty() ? "" : ", ") + n;
      throw InputError("no value '" + options.value + "' in either run (recorded: " + seen + ")");
    }
    if (out.values_compared == 0)
      throw InputError("no value recorded by both runs at the same step and rank; nothing to "
                       "compare");
  }
  return out;
}

}  // namespace laggard
