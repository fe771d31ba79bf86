// laggard._core's view of the detector settings table (laggard/detector_settings.hpp).
#pragma once

#include <pybind11/pybind11.h>

namespace laggard::python {

/// Adds detector_settings() and detector_options() to the module. Needs DetectorOptions, Method
/// and Reference bound (at call time, not at definition).
void bind_detector_settings(pybind11::module_& m);

}  // namespace laggard::python
