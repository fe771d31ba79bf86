// The detector's settings table (laggard/detector_settings.hpp).
#include "laggard/detector_settings.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

namespace laggard {
namespace {

DetectorSetting number(std::string_view name, double DetectorOptions::*member,
                       std::string_view help) {
  DetectorSetting s;
  s.name = name;
  s.type = DetectorSetting::Type::number;
  s.help = help;
  s.number = member;
  return s;
}

DetectorSetting integer(std::string_view name, int DetectorOptions::*member,
                        std::string_view help) {
  DetectorSetting s;
  s.name = name;
  s.type = DetectorSetting::Type::integer;
  s.help = help;
  s.integer = member;
  return s;
}

// An enum member with its to_string overload and its parse function.
template <auto Member, auto Parse>
DetectorSetting choice(std::string_view name, std::vector<std::string_view> choices,
                       std::string_view help) {
  DetectorSetting s;
  s.name = name;
  s.type = DetectorSetting::Type::choice;
  s.help = help;
  s.choices = std::move(choices);
  s.get_choice = [](const DetectorOptions& o) -> std::string_view { return to_string(o.*Member); };
  s.set_choice = [](DetectorOptions& o, std::string_view text) { o.*Member = Parse(text); };
  return s;
}

std::string number_text(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, static_cast<std::size_t>(result.ptr - buf));
}

std::string names(const std::vector<std::string_view>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out.append(i ? ", " : "").append(v[i]);
  return out;
}

std::string given_text(const DetectorSettingValue& value) {
  if (const auto* d = std::get_if<double>(&value)) return number_text(*d);
  if (const auto* i = std::get_if<std::int64_t>(&value)) return std::to_string(*i);
  return "'" + std::get<std::string>(value) + "'";
}

}  // namespace

const std::vector<DetectorSetting>& detector_settings() {
  // One line per setting users set. Its default is DetectorOptions{}'s; docs/reference/settings.md
  // lists the table (detector_settings_markdown).
  static const std::vector<DetectorSetting> table = {
      choice<&DetectorOptions::method, &parse_method>(
          "method", {"sequential", "threshold"},
          "sequential (the default: evidence over windows against a false-alarm budget) or "
          "threshold (the RFC's per-window rule, k of n)"),
      choice<&DetectorOptions::ref, &parse_reference>(
          "ref", {"mean", "median", "robust"},
          "Reference over ranks of a window's flags: mean (the RFC's), median, robust"),
      number("relative_threshold", &DetectorOptions::relative_threshold,
             "Slow if t >= ref * this (sequential: the slowdown the test is built for)"),
      number("absolute_ms_threshold", &DetectorOptions::absolute_ms_threshold,
             "... or t - ref >= this many ms (inf: off; sequential: the least excess that "
             "counts)"),
      number("mad_z", &DetectorOptions::mad_z, "robust reference: MAD z-score also required"),
      integer("confirm_k", &DetectorOptions::confirm_k,
              "threshold method: confirmed when slow in k ... (persistence)"),
      integer("confirm_n", &DetectorOptions::confirm_n, "... of the last n windows"),
      number("healthy_spread", &DetectorOptions::healthy_spread,
             "A rank this much above the reference is still healthy: a verdict's typical "
             "slowdown must be above it (sequential: also the tests' null hypothesis)"),
      number("min_cost_share", &DetectorOptions::min_cost_share,
             "A verdict's typical excess must cost at least this share of the step time "
             "(0.005: 0.5 %)"),
      number("false_alarm_budget", &DetectorOptions::false_alarm_budget,
             "sequential method: chance of any false confirmation in a run of 500 sampled "
             "windows"),
  };
  return table;
}

const DetectorSetting* find_detector_setting(std::string_view name) {
  for (const DetectorSetting& s : detector_settings())
    if (s.name == name) return &s;
  return nullptr;
}

const std::vector<std::string_view>& detector_presets() {
  static const std::vector<std::string_view> presets = {"default", "rfc", "recommended"};
  return presets;
}

std::string DetectorSetting::flag() const {
  std::string f = "--" + std::string(name);
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

std::string DetectorSetting::value(const DetectorOptions& options) const {
  switch (type) {
    case Type::number:
      return number_text(options.*number);
    case Type::integer:
      return std::to_string(options.*integer);
    case Type::choice:
      return std::string(get_choice(options));
  }
  return {};
}

void set_detector_setting(DetectorOptions& options, std::string_view name,
                          const DetectorSettingValue& value) {
  const DetectorSetting* s = find_detector_setting(name);
  if (s == nullptr) {
    std::vector<std::string_view> known;
    for (const DetectorSetting& d : detector_settings()) known.push_back(d.name);
    throw std::invalid_argument("unknown detector setting '" + std::string(name) +
                                "': expected one of " + names(known));
  }
  const std::string subject = "detector setting '" + std::string(name) + "'";
  switch (s->type) {
    case DetectorSetting::Type::number:
      if (const auto* d = std::get_if<double>(&value))
        options.*(s->number) = *d;
      else if (const auto* i = std::get_if<std::int64_t>(&value))
        options.*(s->number) = static_cast<double>(*i);
      else
        throw std::invalid_argument(subject + " takes a number, got " + given_text(value));
      return;
    case DetectorSetting::Type::integer: {
      const auto* i = std::get_if<std::int64_t>(&value);
      if (i == nullptr)
        throw std::invalid_argument(subject + " takes a whole number, got " + given_text(value));
      if (*i < std::numeric_limits<int>::min() || *i > std::numeric_limits<int>::max())
        throw std::invalid_argument(subject + " is out of range (" + std::to_string(*i) + ")");
      options.*(s->integer) = static_cast<int>(*i);
      return;
    }
    case DetectorSetting::Type::choice: {
      const auto* text = std::get_if<std::string>(&value);
      if (text == nullptr)
        throw std::invalid_argument(subject + " takes one of " + names(s->choices) + ", got " +
                                    given_text(value));
      bool known = false;
      for (std::string_view c : s->choices) known = known || c == *text;
      if (!known)
        throw std::invalid_argument(subject + " is one of " + names(s->choices) + ", got '" +
                                    *text + "'");
      s->set_choice(options, *text);
      return;
    }
  }
}

DetectorOptions resolve_detector_options(
    std::string_view preset, int world_size,
    const std::vector<std::pair<std::string, DetectorSettingValue>>& given) {
  DetectorOptions o =
      preset.empty() ? DetectorOptions{} : DetectorOptions::preset(preset, world_size);
  for (const auto& [name, value] : given) set_detector_setting(o, name, value);
  o.validate();
  return o;
}

std::string detector_settings_markdown() {
  const DetectorOptions defaults;
  const DetectorOptions rfc = DetectorOptions::preset("rfc", 1);
  std::string out =
      "| setting | `laggard` flag | Python flag | type | default | `rfc` preset | what it sets |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const DetectorSetting& s : detector_settings()) {
    const std::string flag = s.flag();
    const char* type = s.type == DetectorSetting::Type::number    ? "number"
                       : s.type == DetectorSetting::Type::integer ? "integer"
                                                                  : nullptr;
    const std::string type_text = type ? type : names(s.choices);
    out += "| `" + std::string(s.name) + "` | `" + flag + "` | `--straggler-" + flag.substr(2) +
           "` | " + type_text + " | " + s.value(defaults) + " | " + s.value(rfc) + " | " +
           std::string(s.help) + " |\n";
  }
  return out;
}

}  // namespace laggard
