// laggard — the detector's settings as one table (name, type, default, help) and the one rule
// for a preset with settings given on top of it. The `laggard` program's flags, the Python flags
// (laggard.add_arguments) and keyword checking, and the table in docs/detection.md are all made
// from it, so a setting and its presets mean the same everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "laggard/detector.hpp"
#include "laggard/export.hpp"

namespace laggard {

/// One detector setting: a member of DetectorOptions, under the same name everywhere (the C++
/// member, the Python keyword argument, `--relative-threshold` in the program,
/// `--straggler-relative-threshold` in Python). Its default is DetectorOptions{}'s value.
struct LAGGARD_API DetectorSetting {
  enum class Type : std::uint8_t {
    number,   ///< a double (the program and Python also take "inf")
    integer,  ///< an int
    choice    ///< one of `choices`, by name
  };
  std::string_view name;  ///< "relative_threshold"
  Type type = Type::number;
  std::string_view help;                      ///< one line, as --help prints it
  std::vector<std::string_view> choices;      ///< Type::choice: the names it takes
  double DetectorOptions::*number = nullptr;  ///< Type::number: the member
  int DetectorOptions::*integer = nullptr;    ///< Type::integer: the member
  /// Type::choice: the name of the value `options` holds, and setting it by name (throws
  /// std::invalid_argument naming the value for one not in `choices`).
  std::string_view (*get_choice)(const DetectorOptions& options) = nullptr;
  void (*set_choice)(DetectorOptions& options, std::string_view choice) = nullptr;

  /// "--relative-threshold": the name with '-' for '_'.
  std::string flag() const;
  /// The value in `options` as text: "1.1", "inf", "2", "robust" (numbers in their shortest
  /// round-trip form).
  std::string value(const DetectorOptions& options) const;
};

/// A value given for a setting: a number (a Type::number setting takes either kind, a
/// Type::integer one a whole number within int's range) or a choice's name.
using DetectorSettingValue = std::variant<double, std::int64_t, std::string>;

/// Every setting, in the order the help lists them. Adding a member to DetectorOptions that
/// users set is one line in this table (src/analysis/detector_settings.cc). Thread-safe
/// (built once, never changed).
LAGGARD_API const std::vector<DetectorSetting>& detector_settings();

/// The setting called `name`, or nullptr. Thread-safe.
LAGGARD_API const DetectorSetting* find_detector_setting(std::string_view name);

/// The presets DetectorOptions::preset knows: "default", "rfc", "recommended" (= default).
LAGGARD_API const std::vector<std::string_view>& detector_presets();

/// Sets the setting `name` of `options` to `value`. Throws std::invalid_argument for an unknown
/// name (listing the known ones), a value of the wrong type, or a choice not among `choices`;
/// the value itself is checked by DetectorOptions::validate(), not here. Thread-safe.
LAGGARD_API void set_detector_setting(DetectorOptions& options, std::string_view name,
                                      const DetectorSettingValue& value);

/// The options of `preset` (DetectorOptions::preset; the defaults when `preset` is empty) with
/// each setting of `given` set on top, in order, then validated: a setting given wins over the
/// preset's value. The one rule of `laggard analyze --preset P --FLAG V`, of Python's
/// `--straggler-preset P --straggler-FLAG V` and of `_core.detector_options(P, n, FLAG=V)`.
/// Throws std::invalid_argument naming what is wrong. Thread-safe.
LAGGARD_API DetectorOptions
resolve_detector_options(std::string_view preset, int world_size,
                         const std::vector<std::pair<std::string, DetectorSettingValue>>& given);

/// The settings as the Markdown table docs/detection.md shows (setting, flags, type, default,
/// the rfc preset's value, help); tests/cpp/detector_settings_test.cc fails when the doc's copy
/// differs. Thread-safe.
LAGGARD_API std::string detector_settings_markdown();

}  // namespace laggard
