// laggard._core.detector_settings() and detector_options(): the C++ settings table and preset
// rule, for laggard.add_arguments, the Analyzer's keyword checking and the demo.
#include "detector_settings.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "laggard/detector_settings.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace laggard::python {
namespace {

// A setting's value as Python has it: float, int or str.
py::object to_python(const DetectorSetting& s, const DetectorOptions& o) {
  switch (s.type) {
    case DetectorSetting::Type::number:
      return py::float_(o.*(s.number));
    case DetectorSetting::Type::integer:
      return py::int_(o.*(s.integer));
    case DetectorSetting::Type::choice:
      return py::str(std::string(s.get_choice(o)));
  }
  return py::none();
}

// A keyword argument's value: an int, a float, a str, or the Method / Reference enum (by name).
// bool is not a number here (True is not 1 ms).
DetectorSettingValue from_python(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v))
    throw py::type_error("detector setting '" + name + "' takes no bool, got " +
                         py::repr(v).cast<std::string>());
  if (py::isinstance<py::int_>(v)) return v.cast<std::int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<Method>(v)) return std::string(to_string(v.cast<Method>()));
  if (py::isinstance<Reference>(v)) return std::string(to_string(v.cast<Reference>()));
  throw py::type_error("detector setting '" + name + "' takes a number or a name, got " +
                       py::repr(v).cast<std::string>() + " (" +
                       py::str(v.get_type().attr("__name__")).cast<std::string>() + ")");
}

}  // namespace

void bind_detector_settings(py::module_& m) {
  m.def(
      "detector_settings",
      [] {
        const DetectorOptions defaults;
        py::list rows;
        for (const DetectorSetting& s : detector_settings()) {
          py::dict presets;
          for (std::string_view p : detector_presets())
            presets[py::str(std::string(p))] = to_python(s, DetectorOptions::preset(p, 1));
          py::list choices;
          for (std::string_view c : s.choices) choices.append(std::string(c));
          const char* type = s.type == DetectorSetting::Type::number    ? "number"
                             : s.type == DetectorSetting::Type::integer ? "integer"
                                                                        : "choice";
          rows.append(py::dict("name"_a = std::string(s.name), "type"_a = type,
                               "default"_a = to_python(s, defaults), "choices"_a = choices,
                               "help"_a = std::string(s.help), "flag"_a = s.flag(),
                               "presets"_a = presets));
        }
        return rows;
      },
      "The detector settings table: per setting a dict of name, type ('number', 'integer', "
      "'choice'), default, choices, help, flag (the `laggard` program's) and presets (each "
      "preset's value). laggard/detector_settings.hpp.");
  m.def(
      "detector_options",
      [](const py::object& preset, int world_size, const py::kwargs& settings) {
        std::vector<std::pair<std::string, DetectorSettingValue>> given;
        for (const auto& item : settings) {
          if (item.second.is_none()) continue;  // None: not given (the preset's or default)
          const std::string name = py::str(item.first).cast<std::string>();
          given.emplace_back(name, from_python(name, item.second));
        }
        const std::string p =
            preset.is_none() ? std::string() : py::str(preset).cast<std::string>();
        return resolve_detector_options(p, world_size, given);
      },
      "DetectorOptions of a preset (None: the defaults) with the settings given on top of it "
      "(None: not given), validated: the rule of `laggard analyze --preset P --FLAG V`. "
      "ValueError names an unknown setting or preset or a bad value; TypeError a wrong type.",
      "preset"_a = py::none(), "world_size"_a = 1);
}

}  // namespace laggard::python
