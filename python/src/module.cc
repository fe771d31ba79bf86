// laggard._core: the C++ core for the Pythonic layer in python/laggard/. pybind11 stays in
// python/src: the public headers in include/laggard never see it. One file per concern:
// model.cc (samples, the JSONL parser, the run reader), analysis.cc (the detector),
// recorder.cc (the standalone Recorder), hot_calls.cc (the training thread's builtins),
// hook_switch.cc (laggard.torch's hook types), engine.cc (the live engine), conversions.cc.
#include "bindings.hpp"
#include "detector_settings.hpp"

PYBIND11_MODULE(_core, m) {
  using namespace laggard;
  namespace lp = laggard::py_bindings;
  m.doc() = "laggard C++ core: the live engine, recorder, JSONL samples and straggler analysis";
  m.attr("__version__") = kVersion;
  m.attr("SAMPLE_SCHEMA") = std::string(kSampleSchema);
  pybind11::register_exception<InputError>(m, "InputError", PyExc_OSError);
  lp::init_hot_types(m);
  lp::bind_hook_types(m);
  lp::bind_model(m);
  lp::bind_analysis(m);
  lp::bind_recorder(m);
  lp::bind_engine(m);
  python::bind_detector_settings(m);
}
