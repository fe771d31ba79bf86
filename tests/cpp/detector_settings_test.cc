// Tests for the detector's settings table (src/analysis/detector_settings.cc): names, values, the
// preset rule, and the copy of the table in docs/reference/settings.md.
#include "laggard/detector_settings.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace laggard {
namespace {

// Every member of two options, through the table and the members it leaves out.
std::string all_values(const DetectorOptions& o) {
  std::string out;
  for (const DetectorSetting& s : detector_settings())
    out += std::string(s.name) + "=" + s.value(o) + " ";
  out += "healthy_spread=" + std::to_string(o.healthy_spread) +
         " pause_rate=" + std::to_string(o.pause_rate) +
         " budget_windows=" + std::to_string(o.budget_windows);
  return out;
}

TEST(DetectorSettings, NamesFlagsAndDefaultsComeFromDetectorOptions) {
  const DetectorOptions d;
  ASSERT_FALSE(detector_settings().empty());
  for (const DetectorSetting& s : detector_settings()) {
    EXPECT_EQ(find_detector_setting(s.name), &s);
    EXPECT_FALSE(s.help.empty()) << s.name;
    std::string flag = "--" + std::string(s.name);
    for (char& c : flag) c = c == '_' ? '-' : c;
    EXPECT_EQ(s.flag(), flag);
    EXPECT_EQ(s.type == DetectorSetting::Type::choice, !s.choices.empty()) << s.name;
  }
  EXPECT_EQ(find_detector_setting("relative_threshold")->value(d), "1.1");
  EXPECT_EQ(find_detector_setting("absolute_ms_threshold")->value(d), "inf");
  EXPECT_EQ(find_detector_setting("confirm_k")->value(d), "2");
  EXPECT_EQ(find_detector_setting("ref")->value(d), "robust");
  EXPECT_EQ(find_detector_setting("method")->value(d), "sequential");
  EXPECT_EQ(find_detector_setting("relative-threshold"), nullptr);
}

TEST(DetectorSettings, SetsEachSettingByName) {
  DetectorOptions o;
  set_detector_setting(o, "relative_threshold", 1.25);
  set_detector_setting(o, "absolute_ms_threshold", std::int64_t{4});  // a whole number is a number
  set_detector_setting(o, "confirm_n", std::int64_t{5});
  set_detector_setting(o, "ref", std::string("median"));
  set_detector_setting(o, "method", std::string("threshold"));
  EXPECT_EQ(o.relative_threshold, 1.25);
  EXPECT_EQ(o.absolute_ms_threshold, 4.0);
  EXPECT_EQ(o.confirm_n, 5);
  EXPECT_EQ(o.ref, Reference::median);
  EXPECT_EQ(o.method, Method::threshold);
}

TEST(DetectorSettings, RefusesUnknownNamesAndWrongTypesNamingThem) {
  DetectorOptions o;
  const auto message = [&](const char* name, const DetectorSettingValue& v) {
    try {
      set_detector_setting(o, name, v);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message("relative_treshold", 1.2).find("unknown detector setting 'relative_treshold'"),
            std::string::npos);
  EXPECT_NE(message("relative_treshold", 1.2).find("relative_threshold"), std::string::npos);
  EXPECT_NE(message("confirm_k", 2.5).find("'confirm_k' takes a whole number, got 2.5"),
            std::string::npos);
  EXPECT_NE(message("confirm_k", std::int64_t{1} << 40).find("out of range"), std::string::npos);
  EXPECT_NE(message("mad_z", std::string("3")).find("'mad_z' takes a number, got '3'"),
            std::string::npos);
  EXPECT_NE(message("ref", std::string("max")).find("'ref' is one of mean, median, robust"),
            std::string::npos);
  EXPECT_NE(message("ref", 1.0).find("'ref' takes one of"), std::string::npos);
}

TEST(DetectorSettings, APresetWithSettingsGivenOnTop) {
  EXPECT_EQ(all_values(resolve_detector_options("", 8, {})), all_values(DetectorOptions{}));
  EXPECT_EQ(all_values(resolve_detector_options("rfc", 8, {})), all_values(DetectorOptions::rfc()));
  EXPECT_EQ(all_values(resolve_detector_options("recommended", 8, {})),
            all_values(DetectorOptions::recommended(8)));
  DetectorOptions expected = DetectorOptions::rfc();
  expected.confirm_k = 3;
  expected.confirm_n = 5;
  EXPECT_EQ(all_values(resolve_detector_options(
                "rfc", 8, {{"confirm_k", std::int64_t{3}}, {"confirm_n", std::int64_t{5}}})),
            all_values(expected));
  // Without a preset, the settings given go on top of the defaults.
  expected = DetectorOptions{};
  expected.ref = Reference::mean;
  EXPECT_EQ(all_values(resolve_detector_options("", 8, {{"ref", std::string("mean")}})),
            all_values(expected));
  // The result is validated, and an unknown preset is refused.
  EXPECT_THROW(resolve_detector_options("rfc", 8, {{"confirm_k", std::int64_t{4}}}),
               std::invalid_argument);
  EXPECT_THROW(resolve_detector_options("fastest", 8, {}), std::invalid_argument);
  for (std::string_view p : detector_presets()) EXPECT_NO_THROW(DetectorOptions::preset(p, 8));
}

TEST(DetectorSettings, EveryPresetIsTheDefaultsWithTableSettingsChanged) {
  // What a preset changes is a row of the table: the table can say what each preset sets.
  for (std::string_view p : detector_presets()) {
    const DetectorOptions preset = DetectorOptions::preset(p, 16);
    std::vector<std::pair<std::string, DetectorSettingValue>> given;
    for (const DetectorSetting& s : detector_settings()) {
      switch (s.type) {
        case DetectorSetting::Type::number:
          given.emplace_back(std::string(s.name), preset.*(s.number));
          break;
        case DetectorSetting::Type::integer:
          given.emplace_back(std::string(s.name), static_cast<std::int64_t>(preset.*(s.integer)));
          break;
        case DetectorSetting::Type::choice:
          given.emplace_back(std::string(s.name), std::string(s.get_choice(preset)));
          break;
      }
    }
    EXPECT_EQ(all_values(resolve_detector_options("", 16, given)), all_values(preset)) << p;
  }
}

TEST(DetectorSettings, TheDocsListTheTable) {
  const std::string path = std::string(LAGGARD_TEST_DATA) + "/../../docs/reference/settings.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string begin = "<!-- detector-settings: made by detector_settings_markdown() -->\n";
  const std::string end = "<!-- /detector-settings -->";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << path << " has no line " << begin;
  ASSERT_NE(e, std::string::npos) << path << " has no line " << end;
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), detector_settings_markdown())
      << path << " lists other settings than the table; between its markers it should read:\n"
      << detector_settings_markdown();
}

}  // namespace
}  // namespace laggard
