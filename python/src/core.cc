// laggard._core — the one pybind11 file. It binds the C++ core (recorder, sample queue, JSONL,
// detector) for the Pythonic layer in python/laggard/. pybind11 stays here: the public headers in
// include/laggard never see it.
//
// GIL rules: the training-thread calls (Recorder.begin/end/begin_step/end_step/add) keep the GIL,
// because releasing and re-taking it costs more than the call and may hand the interpreter to
// another thread mid-step. Everything that can take long (waiting on the sample queue, parsing
// and analysing a window, reading a run directory) runs with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <structmember.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "laggard/laggard.hpp"
#include "live/line_file.hpp"
#include "live/report_json.hpp"
#include "sample_queue.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace laggard {
namespace {

// ---------------------------------------------------------------------------------------------
// Recorder with its queue and backend choice.

/// The Python-facing recorder: a laggard::Recorder, the queue its samples go to, and why a
/// device backend was not used (empty when it was, or when none was asked for).
class PyRecorder {
 public:
  PyRecorder(int interval, int rank, int world_size, int local_rank, std::string host,
             std::string cohort, int max_pending_steps, const std::string& backend, int device,
             std::uint32_t capacity) {
    RecorderOptions options;
    options.interval = interval;
    options.rank.rank = rank;
    options.rank.world_size = world_size;
    options.rank.local_rank = local_rank;
    options.rank.host = std::move(host);
    options.rank.cohort = std::move(cohort);
    options.max_pending_steps = max_pending_steps;
    std::unique_ptr<TimingBackend> timing;
    if (backend == "cuda") {
      CudaBackendResult made;
      {
        py::gil_scoped_release nogil;  // first use opens libcuda and calls cuInit
        made = make_cuda_backend(capacity, device);
      }
      if (made.backend)
        timing = std::move(made.backend);
      else
        reason_ = made.reason.empty() ? std::string("CUDA backend unavailable") : made.reason;
    } else if (backend != "host") {
      throw std::invalid_argument("Recorder: backend must be 'host' or 'cuda', got '" + backend +
                                  "'");
    }
    recorder_ = std::make_unique<Recorder>(std::move(options), std::move(timing));
  }

  Recorder& rec() { return *recorder_; }
  const std::string& reason() const { return reason_; }

  void attach(std::shared_ptr<SampleQueue> queue) {
    queue_ = std::move(queue);
    if (queue_) {
      SampleQueue* q = queue_.get();
      recorder_->on_sample([q](const StepSample& s) { q->push(s); });
    } else {
      recorder_->on_sample(nullptr);
    }
  }
  std::shared_ptr<SampleQueue> queue() const { return queue_; }

  bool begin_step(std::int64_t step) {
    // The log format has no negative steps (the reader refuses such a line): refused here, so
    // that the Analyzer counts it instead of logging a line that analysis would drop.
    if (step < 0)
      throw std::invalid_argument("begin_step(" + std::to_string(step) +
                                  "): the step must be >= 0; this step is not sampled");
    const bool open = recorder_->sampled();  // a step never ended is closed by begin_step
    recorder_->begin_step(step);
    if (open && queue_) queue_->mark_round();
    return recorder_->sampled();
  }
  void end_step() {
    if (!recorder_->sampled()) return;
    recorder_->end_step();
    if (queue_) queue_->mark_round();
  }

 private:
  std::unique_ptr<Recorder> recorder_;
  std::shared_ptr<SampleQueue> queue_;
  std::string reason_;
};

// ---------------------------------------------------------------------------------------------
// Training-thread calls without pybind11's dispatcher.
//
// A pybind11 call is cheap in a loop (~0.5 µs) but not on a training thread: a training step
// evicts the CPU caches, and the first call after it runs pybind11's generic dispatcher (function
// record, argument casters, overload loop) from cold memory, ~8 µs more than a plain CPython
// builtin (measured in bench/cold_calls.py). Sampled steps make ~10 such calls, so the calls the
// training thread makes on a sampled step — the recorder's begin_step/end_step/set_stream, a
// stage's begin and end, a section's __enter__/__exit__ — are CPython builtins and one small
// context-manager type written against the C API. Each holds a strong reference to its
// _core.Recorder.

/// What the builtins are bound to (their `self`): the recorder and one stage id.
struct HotHandle {
  PyObject_HEAD
  PyObject* owner;  // the _core.Recorder, kept alive
  PyRecorder* rec;
  int id;
};

void hot_handle_dealloc(PyObject* self) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  Py_XDECREF(h->owner);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);  // heap type instances own a reference to their type
}

PyObject* hot_begin(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  h->rec->rec().begin(h->id);
  Py_RETURN_NONE;
}

PyObject* hot_end(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  h->rec->rec().end(h->id);
  Py_RETURN_NONE;
}

PyObject* hot_cancel(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  h->rec->rec().cancel(h->id);
  Py_RETURN_NONE;
}

PyObject* hot_begin_step(PyObject* self, PyObject* arg) {
  const long long step = PyLong_AsLongLong(arg);
  if (step == -1 && PyErr_Occurred()) return nullptr;
  if (step < 0) {  // PyRecorder::begin_step would throw, and no C++ exception may cross here
    PyErr_Format(PyExc_ValueError, "begin_step(%lld): the step must be >= 0; this step is not "
                 "sampled", step);
    return nullptr;
  }
  const bool sampled = reinterpret_cast<HotHandle*>(self)->rec->begin_step(step);
  return PyBool_FromLong(sampled);
}

PyObject* hot_end_step(PyObject* self, PyObject*) {
  reinterpret_cast<HotHandle*>(self)->rec->end_step();
  Py_RETURN_NONE;
}

PyObject* hot_set_stream(PyObject* self, PyObject* arg) {
  const unsigned long long handle = PyLong_AsUnsignedLongLong(arg);
  if (handle == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
  if (TimingBackend* b = reinterpret_cast<HotHandle*>(self)->rec->rec().backend())
    b->set_stream(reinterpret_cast<void*>(static_cast<std::uintptr_t>(handle)));
  Py_RETURN_NONE;
}

PyObject* hot_enter(PyObject* self, PyObject*) { return hot_begin(self, nullptr, 0); }

PyObject* hot_exit(PyObject* self, PyObject* const*, Py_ssize_t) {
  reinterpret_cast<HotHandle*>(self)->rec->rec().end(reinterpret_cast<HotHandle*>(self)->id);
  Py_RETURN_FALSE;  // exceptions of the with-body pass through
}

PyObject* hot_scope_id(PyObject* self, void*) {
  return PyLong_FromLong(reinterpret_cast<HotHandle*>(self)->id);
}

// Static: a builtin keeps a pointer to its PyMethodDef.
PyMethodDef kHotBegin = {"begin", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hot_begin)),
                         METH_FASTCALL, "Begins this stage (any arguments are ignored)."};
PyMethodDef kHotEnd = {"end", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hot_end)),
                       METH_FASTCALL, "Ends this stage (any arguments are ignored)."};
PyMethodDef kHotCancel = {"cancel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hot_cancel)),
                          METH_FASTCALL,
                          "Drops this stage's open entry uncounted (any arguments are ignored)."};
PyMethodDef kHotBeginStep = {"begin_step", hot_begin_step, METH_O,
                             "Starts a step; returns whether it is sampled."};
PyMethodDef kHotEndStep = {"end_step", hot_end_step, METH_NOARGS, "Ends the step."};
PyMethodDef kHotSetStream = {"set_stream", hot_set_stream, METH_O,
                             "Device backends: later marks go on this stream (an int handle)."};

PyMethodDef kScopeMethods[] = {
    {"__enter__", hot_enter, METH_NOARGS, nullptr},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hot_exit)),
     METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr}};
PyGetSetDef kScopeGetSet[] = {{"id", hot_scope_id, nullptr, "The stage id.", nullptr},
                              {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot kHandleSlots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(hot_handle_dealloc)},
                              {Py_tp_doc, const_cast<char*>("A recorder and a stage id, bound to "
                                                            "laggard's training-thread builtins.")},
                              {0, nullptr}};
PyType_Spec kHandleSpec = {"laggard._core.RecorderHandle", sizeof(HotHandle), 0,
                           Py_TPFLAGS_DEFAULT, kHandleSlots};
PyType_Slot kScopeSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(hot_handle_dealloc)},
    {Py_tp_methods, kScopeMethods},
    {Py_tp_getset, kScopeGetSet},
    {Py_tp_doc, const_cast<char*>("Context manager of one stage (Recorder.section): begin on "
                                  "enter, end on exit.")},
    {0, nullptr}};
PyType_Spec kScopeSpec = {"laggard._core.SectionScope", sizeof(HotHandle), 0, Py_TPFLAGS_DEFAULT,
                          kScopeSlots};

PyTypeObject* g_handle_type = nullptr;  // set at module init, alive as long as the module
PyTypeObject* g_scope_type = nullptr;

py::object new_handle(PyTypeObject* type, const py::object& owner, int id) {
  PyObject* obj = type->tp_alloc(type, 0);
  if (!obj) throw py::error_already_set();
  auto* h = reinterpret_cast<HotHandle*>(obj);
  h->owner = owner.inc_ref().ptr();
  h->rec = &owner.cast<PyRecorder&>();
  h->id = id;
  return py::reinterpret_steal<py::object>(obj);
}

py::object new_builtin(PyMethodDef* def, const py::object& handle) {
  PyObject* fn = PyCFunction_NewEx(def, handle.ptr(), nullptr);
  if (!fn) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
}

// ---------------------------------------------------------------------------------------------
// Conversions

StageKind kind_from(const py::handle& h) {
  if (py::isinstance<StageKind>(h)) return h.cast<StageKind>();
  if (py::isinstance<py::str>(h)) {
    const auto text = h.cast<std::string>();
    if (auto k = parse_stage_kind(text)) return *k;
    throw std::invalid_argument("unknown stage kind '" + text +
                                "' (expected compute, communication, data or other)");
  }
  throw std::invalid_argument("stage kind must be a StageKind or a string");
}

py::object metric_value(const MetricValue& v) {
  if (const double* d = std::get_if<double>(&v)) return py::float_(*d);
  return py::str(std::get<std::string>(v));
}

py::dict metrics_dict(const Metrics& metrics) {
  py::dict out;
  for (const auto& [name, value] : metrics) out[py::str(name)] = metric_value(value);
  return out;
}

py::dict finding_dict(const RankFinding& f) {
  return py::dict("rank"_a = f.rank, "host"_a = f.host, "cohort"_a = f.cohort,
                  "stage"_a = f.stage, "kind"_a = to_string(f.kind),
                  "role"_a = f.role == RankFinding::Role::straggler ? "straggler" : "waiting",
                  "ms"_a = f.ms, "ref_ms"_a = f.ref_ms, "slowdown"_a = f.slowdown,
                  "windows_flagged"_a = f.windows_flagged, "confirmed"_a = f.confirmed,
                  "evidence"_a = f.evidence);
}

py::dict report_dict(const Report& r, int local_rank) {
  py::list stages;
  for (const StageFigures& f : r.stages) {
    py::dict ranks_ms;
    for (std::size_t i = 0; i < f.rank_ids.size() && i < f.rank_ms.size(); ++i)
      ranks_ms[py::int_(f.rank_ids[i])] = f.rank_ms[i];
    stages.append(py::dict(
        "cohort"_a = f.cohort, "stage"_a = f.stage, "kind"_a = to_string(f.kind),
        "ranks"_a = f.ranks, "ref_ms"_a = f.ref_ms, "mean_ms"_a = f.mean_ms,
        "median_ms"_a = f.median_ms, "min_ms"_a = f.min_ms, "max_ms"_a = f.max_ms,
        "slowdown_ratio"_a = f.slowdown_ratio, "relative_score"_a = f.relative_score,
        "top_rank"_a = f.top_rank, "num_stragglers"_a = f.num_stragglers,
        "flagged_ranks"_a = f.flagged_ranks, "rank_ms"_a = ranks_ms));
  }
  py::list stragglers, waiting, hosts;
  for (const RankFinding& f : r.stragglers) stragglers.append(finding_dict(f));
  for (const RankFinding& f : r.waiting) waiting.append(finding_dict(f));
  for (const HostFinding& h : r.slow_hosts)
    hosts.append(py::dict("host"_a = h.host, "cohort"_a = h.cohort, "stage"_a = h.stage,
                          "ranks"_a = h.ranks, "slowdown"_a = h.slowdown));
  return py::dict("step"_a = r.step, "ranks_seen"_a = r.ranks_seen,
                  "world_size"_a = r.world_size, "stages"_a = stages,
                  "stragglers"_a = stragglers, "waiting"_a = waiting, "slow_hosts"_a = hosts,
                  "likely_bottleneck"_a = r.likely_bottleneck,
                  "whatif_step_saving_ms"_a = r.whatif_step_saving_ms, "hints"_a = r.hints,
                  "metrics"_a = metrics_dict(r.metrics(local_rank)));
}

py::dict counters_dict(const RecorderCounters& c) {
  return py::dict("sampled_steps"_a = c.sampled_steps, "samples_emitted"_a = c.samples_emitted,
                  "dropped_stages"_a = c.dropped_stages,
                  "dropped_intervals"_a = c.dropped_intervals,
                  "dropped_steps"_a = c.dropped_steps, "unbalanced"_a = c.unbalanced);
}

// StepSample.values / .resources as a dict {name: float} (insertion order = sample order).
template <std::vector<NamedValue> StepSample::*Field>
py::dict named_dict(const StepSample& s) {
  py::dict out;
  for (const NamedValue& v : s.*Field) out[py::str(v.name)] = v.value;
  return out;
}
template <std::vector<NamedValue> StepSample::*Field>
void set_named(StepSample& s, const py::dict& values) {
  std::vector<NamedValue> list;
  for (auto [name, value] : values)
    list.push_back({py::cast<std::string>(name), py::cast<double>(value)});
  s.*Field = std::move(list);
}

StepSample parse_line(SampleParser& parser, const std::string& line) {
  StepSample s;
  std::string error;
  if (!parser.parse(line, s, error)) throw std::invalid_argument("bad sample line: " + error);
  return s;
}

/// A window's step: the given one, else the first sample's.
Window make_window(std::vector<StepSample> samples, std::optional<std::int64_t> step) {
  Window w;
  w.step = step ? *step : (samples.empty() ? 0 : samples.front().step);
  w.samples = std::move(samples);
  return w;
}

/// The analysis rank's per-window work in one call, for laggard.live.LiveAnalysis: parse the
/// window's sample lines, run the detector, add the live metrics and format the reports.jsonl
/// line, all with the GIL released — the side-channel thread otherwise holds the GIL for
/// ~100 µs per window, which the training thread waits out (bench/overhead.py). The full report
/// dict is built only when asked for (latest_report).
class LiveDetector {
 public:
  LiveDetector(const DetectorOptions& options, int local_rank, const std::string& report_log)
      : detector_(options), local_rank_(local_rank) {
    report_log_path_ = report_log;
  }

  struct Result {
    Metrics metrics;
    std::size_t parse_errors = 0;
    std::string log_error;  // set when the reports.jsonl line could not be written
  };

  // Thread-safe against report(); called from one thread.
  Result observe(const std::vector<std::string>& lines, std::int64_t step, double report_errors,
                 double dropped_samples, double incomplete_windows) {
    Result out;
    std::lock_guard<std::mutex> lock(mu_);
    window_.step = step;
    if (window_.samples.size() < lines.size()) window_.samples.resize(lines.size());
    std::size_t n = 0;
    for (const std::string& line : lines) {
      if (parser_.parse(line, window_.samples[n], error_))
        ++n;
      else
        ++out.parse_errors;
    }
    window_.samples.resize(n);
    detector_.observe(window_, report_);
    out.metrics = report_.metrics(local_rank_);
    add_live_metrics(report_, report_errors, dropped_samples, incomplete_windows, out.metrics);
    if (!report_log_path_.empty()) {
      report_line_.clear();
      append_report_json(step, out.metrics, report_, report_line_);
      report_log_.write(report_log_path_, report_line_, out.log_error);
    }
    metrics_ = out.metrics;
    has_report_ = true;
    return out;
  }

  // The latest metrics as a dict ({} before the first report).
  py::dict latest_metrics() {
    std::lock_guard<std::mutex> lock(mu_);
    return metrics_dict(metrics_);
  }

  void close_log() {
    std::lock_guard<std::mutex> lock(mu_);
    report_log_.close();
  }

  // The latest report as laggard.Detector.observe returns it, metrics with the live extras.
  py::object report() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!has_report_) return py::none();
    py::dict out = report_dict(report_, local_rank_);
    out["metrics"] = metrics_dict(metrics_);
    return std::move(out);
  }

  const Detector& detector() const noexcept { return detector_; }

 private:
  std::mutex mu_;
  Detector detector_;
  int local_rank_;
  SampleParser parser_;
  std::string error_;
  Window window_;  // reused: its samples keep their buffers window after window
  Report report_;  // reused likewise
  Metrics metrics_;
  bool has_report_ = false;
  std::string report_log_path_;
  LineFile report_log_;
  std::string report_line_;  // reused
};

// ---------------------------------------------------------------------------------------------
// HookSwitch: puts a set of hooks into their dicts at the start of a sampled step and takes them
// out at its end (laggard.torch attaches its hooks on sampled steps only), in two builtin calls.
//
// An entry (dict, key, value) means: `dict` holds `value` under `key` while the switch is on.
// on() remembers what was there before (usually nothing); off() puts that back, but only where
// the entry still holds `value` (if someone replaced it meanwhile, theirs stays). Writes go
// through the mapping protocol, so OrderedDicts (torch's hook dicts) keep their order
// bookkeeping and dict subclasses their __setitem__. Failures are
// not raised: on()/off() return how many entries could not be changed (the caller counts them
// as errors), and an entry that failed to go in is not taken out.

struct HookSwitch {
  PyObject_HEAD
  PyObject* entries;  // tuple of 3-tuples (dict, key, value)
  PyObject* saved;    // list: what each key held before on(), g_missing, or g_not_in
  int is_on;
};

PyObject* g_missing = nullptr;  // sentinels (set at module init): the key was absent before on()
PyObject* g_not_in = nullptr;   // on() could not put this entry in

PyObject* new_ref(PyObject* o) {
  Py_INCREF(o);
  return o;
}

/// dict[key] as a new reference; g_missing when absent; nullptr + error on failure. Read
/// without raising a KeyError for an absent key (which costs more than the lookup); reading an
/// OrderedDict this way leaves its order alone.
PyObject* switch_get(PyObject* dict, PyObject* key) {
  PyObject* v = PyDict_GetItemWithError(dict, key);  // borrowed
  if (v) return new_ref(v);
  return PyErr_Occurred() ? nullptr : new_ref(g_missing);
}

PyObject* switch_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* seq = nullptr;
  static const char* kwlist[] = {"entries", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:HookSwitch", const_cast<char**>(kwlist), &seq))
    return nullptr;
  PyObject* entries = PySequence_Tuple(seq);
  if (!entries) return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(entries);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* e = PyTuple_GET_ITEM(entries, i);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3 || !PyDict_Check(PyTuple_GET_ITEM(e, 0))) {
      Py_DECREF(entries);
      PyErr_Format(PyExc_TypeError,
                   "HookSwitch: entry %zd must be a tuple (dict, key, value)", i);
      return nullptr;
    }
  }
  PyObject* saved = PyList_New(n);
  if (!saved) {
    Py_DECREF(entries);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) PyList_SET_ITEM(saved, i, new_ref(g_not_in));
  auto* self = reinterpret_cast<HookSwitch*>(type->tp_alloc(type, 0));
  if (!self) {
    Py_DECREF(entries);
    Py_DECREF(saved);
    return nullptr;
  }
  self->entries = entries;
  self->saved = saved;
  self->is_on = 0;
  return reinterpret_cast<PyObject*>(self);
}

int switch_traverse(PyObject* o, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<HookSwitch*>(o);
  Py_VISIT(self->entries);
  Py_VISIT(self->saved);
  Py_VISIT(Py_TYPE(o));
  return 0;
}

int switch_clear(PyObject* o) {
  auto* self = reinterpret_cast<HookSwitch*>(o);
  Py_CLEAR(self->entries);
  Py_CLEAR(self->saved);
  return 0;
}

/// tp_dealloc of a garbage-collected heap type whose tp_clear is Clear.
template <int (*Clear)(PyObject*)>
void gc_dealloc(PyObject* o) {
  PyObject_GC_UnTrack(o);
  Clear(o);
  PyTypeObject* type = Py_TYPE(o);
  type->tp_free(o);
  Py_DECREF(type);  // heap type instances own a reference to their type
}

PyObject* switch_on(PyObject* o, PyObject*) {
  auto* self = reinterpret_cast<HookSwitch*>(o);
  if (self->is_on || !self->entries) return PyLong_FromLong(0);
  long failed = 0;
  const Py_ssize_t n = PyTuple_GET_SIZE(self->entries);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* e = PyTuple_GET_ITEM(self->entries, i);
    PyObject* target = PyTuple_GET_ITEM(e, 0);
    PyObject* prev = switch_get(target, PyTuple_GET_ITEM(e, 1));
    const bool ok =
        prev && PyObject_SetItem(target, PyTuple_GET_ITEM(e, 1), PyTuple_GET_ITEM(e, 2)) == 0;
    if (!ok) {
      PyErr_Clear();
      ++failed;
      Py_XDECREF(prev);
      prev = new_ref(g_not_in);  // off() leaves this entry alone
    }
    PyList_SetItem(self->saved, i, prev);  // steals prev
  }
  self->is_on = 1;
  return PyLong_FromLong(failed);
}

PyObject* switch_off(PyObject* o, PyObject*) {
  auto* self = reinterpret_cast<HookSwitch*>(o);
  if (!self->is_on || !self->entries) return PyLong_FromLong(0);
  long failed = 0;
  const Py_ssize_t n = PyTuple_GET_SIZE(self->entries);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* prev = PyList_GET_ITEM(self->saved, i);
    if (prev == g_not_in) continue;
    PyObject* e = PyTuple_GET_ITEM(self->entries, i);
    PyObject* target = PyTuple_GET_ITEM(e, 0);
    PyObject* key = PyTuple_GET_ITEM(e, 1);
    PyObject* now = switch_get(target, key);
    bool ok;
    if (!now) {
      ok = false;
    } else if (now != PyTuple_GET_ITEM(e, 2)) {  // gone or replaced meanwhile: leave theirs
      ok = true;
    } else if (prev == g_missing) {
      ok = PyObject_DelItem(target, key) == 0;
    } else {
      ok = PyObject_SetItem(target, key, prev) == 0;
    }
    Py_XDECREF(now);
    if (!ok) ++failed;
    PyErr_Clear();
    PyList_SetItem(self->saved, i, new_ref(g_not_in));
  }
  self->is_on = 0;
  return PyLong_FromLong(failed);
}

bool switch_has_entry(const HookSwitch* self, Py_ssize_t i) {
  return self->saved && i >= 0 && i < PyList_GET_SIZE(self->saved);
}

/// What entry i's key held before on() (borrowed), or nullptr when nothing (or when off).
/// The entry must exist (switch_has_entry).
PyObject* switch_replaced(const HookSwitch* self, Py_ssize_t i) {
  PyObject* prev = PyList_GET_ITEM(self->saved, i);
  return prev == g_missing || prev == g_not_in ? nullptr : prev;
}

PyObject* switch_previous(PyObject* o, PyObject* arg) {
  auto* self = reinterpret_cast<HookSwitch*>(o);
  const Py_ssize_t i = PyLong_AsSsize_t(arg);
  if (i == -1 && PyErr_Occurred()) return nullptr;
  if (!switch_has_entry(self, i)) {
    PyErr_SetString(PyExc_IndexError, "HookSwitch.previous: no such entry");
    return nullptr;
  }
  PyObject* prev = switch_replaced(self, i);
  if (!prev) Py_RETURN_NONE;
  return new_ref(prev);
}

PyObject* switch_is_on(PyObject* o, void*) {
  return PyBool_FromLong(reinterpret_cast<HookSwitch*>(o)->is_on);
}

PyMethodDef kSwitchMethods[] = {
    {"on", switch_on, METH_NOARGS,
     "Puts every entry's value in; returns how many could not be (0 when already on)."},
    {"off", switch_off, METH_NOARGS,
     "Takes the values out again, putting back what was there; returns the failures."},
    {"previous", switch_previous, METH_O,
     "What entry i's key held before on() (None when nothing, or when off)."},
    {nullptr, nullptr, 0, nullptr}};
PyGetSetDef kSwitchGetSet[] = {{"is_on", switch_is_on, nullptr, "Whether on() is in effect.", nullptr},
                               {nullptr, nullptr, nullptr, nullptr, nullptr}};
PyType_Slot kSwitchSlots[] = {
    {Py_tp_new, reinterpret_cast<void*>(switch_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(gc_dealloc<switch_clear>)},
    {Py_tp_traverse, reinterpret_cast<void*>(switch_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(switch_clear)},
    {Py_tp_methods, kSwitchMethods},
    {Py_tp_getset, kSwitchGetSet},
    {Py_tp_doc, const_cast<char*>(
                    "HookSwitch(entries): entries of (dict, key, value); on() puts each value "
                    "under its key, off() takes it out again and puts back what was there. "
                    "laggard.torch's hooks for sampled steps.")},
    {0, nullptr}};
PyType_Spec kSwitchSpec = {"laggard._core.HookSwitch", sizeof(HookSwitch), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, kSwitchSlots};

PyTypeObject* g_switch_type = nullptr;  // set at module init: MethodWrapper.bind checks for it

// ---------------------------------------------------------------------------------------------
// MethodWrapper: what a HookSwitch puts into an instance's __dict__ in place of one of its
// methods on sampled steps (laggard.torch: the model's forward; the optimizer's step on torch
// 1.13, which has no step hooks). A call runs hooks[pre_key], the inner callable and
// hooks[post_key] without a Python frame of its own (laggard.torch's wrappers were Python
// __call__s before).
//
// The inner callable is what the bound switch's entry replaced (HookSwitch.previous(index): a
// wrapper of the user's or an lr_scheduler's, also one made after the wrapper), else `bound`
// (the class's method). `hooks` is a mapping read at every call, so replacing a hook in it
// takes effect at the next call. Attributes that the type itself does not have are the inner
// callable's (`__self__`, `__func__`, `__name__`, lr_scheduler's `_with_counter`, ...).
//
// Call conventions (`kind`):
//   "forward":   hooks[pre_key](); out = inner(*args, **kwargs); hooks[post_key](out); out
//                (an exception of the inner call propagates, the post hook is not called)
//   "optimizer": hooks[pre_key](obj, args, kwargs); try: return inner(*args, **kwargs)
//                finally: hooks[post_key](obj, args, kwargs)   (torch's step-hook arguments)
// Exceptions behave as in those Python lines: after an exception of the inner call the post
// hook still runs, and that exception then propagates unchanged; if the post hook raises, its
// exception propagates with the inner call's as its __context__. (Unlike a Python finally
// block, sys.exc_info() inside the post hook does not show the inner call's exception: the
// hooks are laggard's marks, which take no notice of it.)

enum WrapperKind { kWrapForward = 0, kWrapOptimizer = 1 };

struct MethodWrapper {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* obj;    // the instance (passed to the optimizer hooks)
  PyObject* bound;  // the class's method bound to obj: the inner callable without a switch
  PyObject* hooks;  // Instrumentation.hooks
  PyObject* pre_key;
  PyObject* post_key;
  PyObject* sw;  // the HookSwitch whose entry `index` puts this wrapper in, or nullptr
  Py_ssize_t index;
  int kind;
};

/// The callable to call (borrowed): what the switch's entry replaced, else `bound` (also when
/// that was this wrapper itself, left in the dict by an off() that failed to take it out).
PyObject* wrapper_inner(MethodWrapper* self) {
  if (self->sw) {
    const auto* sw = reinterpret_cast<HookSwitch*>(self->sw);
    if (switch_has_entry(sw, self->index)) {
      PyObject* prev = switch_replaced(sw, self->index);
      if (prev && prev != reinterpret_cast<PyObject*>(self)) return prev;
    }
  }
  return self->bound;
}

/// The current exception, normalized with its traceback attached (a new reference), cleared.
PyObject* fetch_exception() {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  return value;
#endif
}

/// Raises `exc` (fetch_exception's result) again; steals it.
void restore_exception(PyObject* exc) {
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyErr_Restore(new_ref(reinterpret_cast<PyObject*>(Py_TYPE(exc))), exc,
                PyException_GetTraceback(exc));
#endif
}

/// hooks[key](*args) with the result dropped; false with the error set on failure.
bool call_hook(PyObject* hooks, PyObject* key, PyObject* const* args, size_t nargs) {
  PyObject* fn = PyObject_GetItem(hooks, key);
  if (!fn) return false;
  PyObject* r = PyObject_Vectorcall(fn, args, nargs, nullptr);
  Py_DECREF(fn);
  if (!r) return false;
  Py_DECREF(r);
  return true;
}

/// inner(*args, **kwargs) on the vectorcall arguments; keeps inner alive during the call (off()
/// may drop the switch's reference to it meanwhile).
PyObject* call_inner(MethodWrapper* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  PyObject* inner = wrapper_inner(self);
  if (!inner) {
    PyErr_SetString(PyExc_ReferenceError, "MethodWrapper: cleared");
    return nullptr;
  }
  // Wrappers calling each other run no Python frame that would count the depth: this does.
  if (Py_EnterRecursiveCall(" in MethodWrapper")) return nullptr;
  Py_INCREF(inner);
  PyObject* out = PyObject_Vectorcall(inner, args, nargsf, kwnames);
  Py_DECREF(inner);
  Py_LeaveRecursiveCall();
  return out;
}

PyObject* wrapper_call_forward(MethodWrapper* self, PyObject* const* args, size_t nargsf,
                               PyObject* kwnames) {
  if (!call_hook(self->hooks, self->pre_key, nullptr, 0)) return nullptr;
  PyObject* out = call_inner(self, args, nargsf, kwnames);
  if (!out) return nullptr;
  if (!call_hook(self->hooks, self->post_key, &out, 1)) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
}

PyObject* wrapper_call_optimizer(MethodWrapper* self, PyObject* const* args, size_t nargsf,
                                 PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  // The hooks' (obj, args, kwargs): a tuple and a fresh dict, as `*args, **kwargs` make them.
  PyObject* tuple = PyTuple_New(nargs);
  if (!tuple) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) PyTuple_SET_ITEM(tuple, i, new_ref(args[i]));
  PyObject* kwargs = PyDict_New();
  if (!kwargs) {
    Py_DECREF(tuple);
    return nullptr;
  }
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
      Py_DECREF(tuple);
      Py_DECREF(kwargs);
      return nullptr;
    }
  }
  PyObject* hook_args[3] = {self->obj, tuple, kwargs};
  PyObject* out = nullptr;
  if (call_hook(self->hooks, self->pre_key, hook_args, 3)) {
    out = call_inner(self, args, nargsf, kwnames);
    if (out) {  // finally, after a return
      if (!call_hook(self->hooks, self->post_key, hook_args, 3)) Py_CLEAR(out);
    } else {  // finally, after an exception of the inner call
      PyObject* raised = fetch_exception();
      if (call_hook(self->hooks, self->post_key, hook_args, 3)) {
        restore_exception(raised);  // the inner call's exception, unchanged
      } else {  // the post hook's exception, with the inner call's as its __context__
        PyObject* late = fetch_exception();
        PyException_SetContext(late, raised);  // steals `raised`
        restore_exception(late);
      }
    }
  }
  Py_DECREF(tuple);
  Py_DECREF(kwargs);
  return out;
}

PyObject* wrapper_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf,
                             PyObject* kwnames) {
  auto* self = reinterpret_cast<MethodWrapper*>(callable);
  if (!self->hooks) {  // only after tp_clear
    PyErr_SetString(PyExc_ReferenceError, "MethodWrapper: cleared");
    return nullptr;
  }
  return self->kind == kWrapForward ? wrapper_call_forward(self, args, nargsf, kwnames)
                                    : wrapper_call_optimizer(self, args, nargsf, kwnames);
}

PyObject* wrapper_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *obj, *bound, *hooks, *pre_key, *post_key, *kind_name;
  static const char* kwlist[] = {"obj", "bound", "hooks", "pre_key", "post_key", "kind", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOU:MethodWrapper",
                                   const_cast<char**>(kwlist), &obj, &bound, &hooks, &pre_key,
                                   &post_key, &kind_name))
    return nullptr;
  int kind;
  if (PyUnicode_CompareWithASCIIString(kind_name, "forward") == 0) {
    kind = kWrapForward;
  } else if (PyUnicode_CompareWithASCIIString(kind_name, "optimizer") == 0) {
    kind = kWrapOptimizer;
  } else {
    PyErr_Format(PyExc_ValueError,
                 "MethodWrapper: kind must be 'forward' or 'optimizer', not %R", kind_name);
    return nullptr;
  }
  if (!PyCallable_Check(bound)) {
    PyErr_SetString(PyExc_TypeError, "MethodWrapper: bound must be callable");
    return nullptr;
  }
  if (!PyMapping_Check(hooks)) {
    PyErr_SetString(PyExc_TypeError, "MethodWrapper: hooks must be a mapping");
    return nullptr;
  }
  auto* self = reinterpret_cast<MethodWrapper*>(type->tp_alloc(type, 0));
  if (!self) return nullptr;
  self->vectorcall = wrapper_vectorcall;
  self->obj = new_ref(obj);
  self->bound = new_ref(bound);
  self->hooks = new_ref(hooks);
  self->pre_key = new_ref(pre_key);
  self->post_key = new_ref(post_key);
  self->sw = nullptr;
  self->index = 0;
  self->kind = kind;
  return reinterpret_cast<PyObject*>(self);
}

int wrapper_traverse(PyObject* o, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<MethodWrapper*>(o);
  Py_VISIT(self->obj);
  Py_VISIT(self->bound);
  Py_VISIT(self->hooks);
  Py_VISIT(self->pre_key);
  Py_VISIT(self->post_key);
  Py_VISIT(self->sw);
  Py_VISIT(Py_TYPE(o));
  return 0;
}

int wrapper_clear(PyObject* o) {
  auto* self = reinterpret_cast<MethodWrapper*>(o);
  Py_CLEAR(self->obj);
  Py_CLEAR(self->bound);
  Py_CLEAR(self->hooks);
  Py_CLEAR(self->pre_key);
  Py_CLEAR(self->post_key);
  Py_CLEAR(self->sw);
  return 0;
}


/// Attributes of the type itself (bind, __call__, __class__, __doc__, ...), else the inner
/// callable's: what `__getattr__` would do in Python.
PyObject* wrapper_getattro(PyObject* o, PyObject* name) {
  PyObject* r = PyObject_GenericGetAttr(o, name);
  if (r || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
  PyObject* inner = wrapper_inner(reinterpret_cast<MethodWrapper*>(o));
  if (!inner) return nullptr;  // cleared: the AttributeError stands
  PyErr_Clear();
  Py_INCREF(inner);
  r = PyObject_GetAttr(inner, name);
  Py_DECREF(inner);
  return r;
}

PyObject* wrapper_bind(PyObject* o, PyObject* const* args, Py_ssize_t nargs) {
  auto* self = reinterpret_cast<MethodWrapper*>(o);
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "MethodWrapper.bind(switch, index): two arguments");
    return nullptr;
  }
  if (!PyObject_TypeCheck(args[0], g_switch_type)) {
    PyErr_SetString(PyExc_TypeError, "MethodWrapper.bind: switch must be a HookSwitch");
    return nullptr;
  }
  const Py_ssize_t index = PyLong_AsSsize_t(args[1]);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  if (!switch_has_entry(reinterpret_cast<HookSwitch*>(args[0]), index)) {
    PyErr_SetString(PyExc_IndexError, "MethodWrapper.bind: the switch has no such entry");
    return nullptr;
  }
  PyObject* old = self->sw;
  self->sw = new_ref(args[0]);
  self->index = index;
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

PyMethodDef kWrapperMethods[] = {
    {"bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(wrapper_bind)),
     METH_FASTCALL,
     "bind(switch, index): from now on the inner callable is what the HookSwitch's entry "
     "`index` replaced (switch.previous(index)) when that is not None, else `bound`."},
    {nullptr, nullptr, 0, nullptr}};
PyMemberDef kWrapperMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(MethodWrapper, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};
PyType_Slot kWrapperSlots[] = {
    {Py_tp_new, reinterpret_cast<void*>(wrapper_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(gc_dealloc<wrapper_clear>)},
    {Py_tp_traverse, reinterpret_cast<void*>(wrapper_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(wrapper_clear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_getattro, reinterpret_cast<void*>(wrapper_getattro)},
    {Py_tp_methods, kWrapperMethods},
    {Py_tp_members, kWrapperMembers},
    {Py_tp_doc, const_cast<char*>(
                    "MethodWrapper(obj, bound, hooks, pre_key, post_key, kind): a method's "
                    "stand-in between two hooks, read from `hooks` at each call. kind "
                    "'forward': hooks[pre_key](), the call, hooks[post_key](output); "
                    "'optimizer': hooks[pre_key](obj, args, kwargs), the call, and "
                    "hooks[post_key](obj, args, kwargs) in a finally. It calls what its "
                    "HookSwitch entry replaced (see bind), else `bound`; other attributes are "
                    "that callable's. laggard.torch's forward and torch 1.13 step wrapper.")},
    {0, nullptr}};
PyType_Spec kWrapperSpec = {"laggard._core.MethodWrapper", sizeof(MethodWrapper), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
                            kWrapperSlots};

}  // namespace
}  // namespace laggard

PYBIND11_MODULE(_core, m) {
  using namespace laggard;
  m.doc() = "laggard C++ core: recorder, sample queue, JSONL samples and straggler analysis";
  m.attr("__version__") = kVersion;
  m.attr("SAMPLE_SCHEMA") = std::string(kSampleSchema);
  py::register_exception<InputError>(m, "InputError", PyExc_OSError);
  g_handle_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kHandleSpec));
  g_scope_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kScopeSpec));
  g_switch_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kSwitchSpec));
  auto* wrapper_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kWrapperSpec));
  g_missing = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));
  g_not_in = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));
  if (!g_handle_type || !g_scope_type || !g_switch_type || !wrapper_type || !g_missing ||
      !g_not_in)
    throw py::error_already_set();
  m.attr("HookSwitch") = py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(g_switch_type));
  m.attr("MethodWrapper") =
      py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(wrapper_type));
  m.attr("RecorderHandle") = py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(g_handle_type));
  m.attr("SectionScope") = py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(g_scope_type));

  py::enum_<StageKind>(m, "StageKind", "What a stage's time means (compute, communication, ...).")
      .value("compute", StageKind::compute)
      .value("communication", StageKind::communication)
      .value("data", StageKind::data)
      .value("other", StageKind::other);
  m.def("default_stage_kind", [](const std::string& name) { return default_stage_kind(name); },
        "The kind laggard assumes for a stage name.", "name"_a);

  py::class_<StageTime>(m, "StageTime", "One stage of one rank in one step.")
      .def(py::init([](std::string name, py::object kind, double ms, std::uint32_t calls) {
             StageTime t;
             t.kind = kind.is_none() ? default_stage_kind(name) : kind_from(kind);
             t.name = std::move(name);
             t.ms = ms;
             t.calls = calls;
             return t;
           }),
           "name"_a, "kind"_a = py::none(), "ms"_a = 0.0, "calls"_a = 1)
      .def_readwrite("name", &StageTime::name)
      .def_readwrite("kind", &StageTime::kind)
      .def_readwrite("ms", &StageTime::ms)
      .def_readwrite("calls", &StageTime::calls)
      .def("__repr__", [](const StageTime& t) {
        return "StageTime(" + t.name + ", " + to_string(t.kind) + ", " + std::to_string(t.ms) +
               " ms, " + std::to_string(t.calls) + " calls)";
      });

  py::class_<StepSample>(m, "StepSample", "One rank's figures for one sampled step.")
      .def(py::init<>())
      .def_readwrite("rank", &StepSample::rank)
      .def_readwrite("world_size", &StepSample::world_size)
      .def_readwrite("step", &StepSample::step)
      .def_readwrite("host", &StepSample::host)
      .def_readwrite("cohort", &StepSample::cohort)
      .def_readwrite("step_ms", &StepSample::step_ms)
      .def_readwrite("work", &StepSample::work)
      .def_readwrite("stages", &StepSample::stages, "Stages in pipeline order (a copy on read).")
      .def_property("values", &named_dict<&StepSample::values>, &set_named<&StepSample::values>,
                    "Recorded values {name: float}, in recording order (a copy on read).")
      .def_property("resources", &named_dict<&StepSample::resources>,
                    &set_named<&StepSample::resources>,
                    "Resource readings {name: float} (docs/formats.md; a copy on read).")
      .def("find",
           [](const StepSample& s, const std::string& name) -> std::optional<StageTime> {
             const StageTime* t = s.find(name);
             if (!t) return std::nullopt;
             return *t;
           })
      .def(
          "to_json",
          [](const StepSample& s) {
            std::string out;
            append_sample_json(s, out);
            if (!out.empty() && out.back() == '\n') out.pop_back();
            return out;
          },
          "The sample as one laggard.sample/1 JSON line, without the trailing newline.")
      .def_static(
          "from_json",
          [](const std::string& line) {
            SampleParser parser;
            return parse_line(parser, line);
          },
          "Parses one laggard.sample/1 line; ValueError says what was wrong.", "line"_a)
      .def("__repr__", [](const StepSample& s) {
        return "StepSample(rank=" + std::to_string(s.rank) + ", step=" + std::to_string(s.step) +
               ", stages=" + std::to_string(s.stages.size()) + ")";
      });

  py::class_<SampleParser>(m, "SampleParser", "Reusable laggard.sample/1 line parser.")
      .def(py::init<>())
      .def("parse", [](SampleParser& p, const std::string& line) { return parse_line(p, line); },
           "line"_a);

  py::class_<SampleQueue, std::shared_ptr<SampleQueue>>(
      m, "SampleQueue",
      "Bounded queue of finished samples from the recorder to the rank log and to a consumer "
      "thread, which gets them as JSON lines. Full: the sample is dropped and counted; the "
      "producer never waits. start_writer() gives the rank log a thread of its own, so that a "
      "consumer stuck in a gather or a sink holds up neither the log nor the producer.")
      .def(py::init<std::size_t, std::size_t>(), "capacity"_a = 64, "line_reserve"_a = 1024)
      .def(
          "take",
          [](SampleQueue& q, double timeout_s, double linger_s) {
            SampleQueue::Taken t;
            {
              py::gil_scoped_release nogil;
              t = q.take(timeout_s, linger_s);
            }
            py::list lines;
            for (std::size_t i = 0; i < q.taken_count(); ++i)
              lines.append(py::make_tuple(q.taken()[i].step, q.taken()[i].line));
            return py::make_tuple(t.rounds, lines, t.closed, t.dropped, t.log_errors);
          },
          "Waits up to timeout_s (GIL released) for work, then lingers up to linger_s for more "
          "(several rounds per wake-up; cut short by close or a half-full queue); returns "
          "(rounds, [(step, line)], closed, dropped, log_errors): the counts as of this take "
          "(dropped: samples the consumer will never get, dropped + gather_dropped), so that "
          "the consumer needs no further call into the extension.",
          "timeout_s"_a, "linger_s"_a = 0.0)
      .def("start_writer", &SampleQueue::start_writer,
           "Starts the rank-log writer thread (C++, never takes the GIL): from then on samples "
           "are logged every 100 ms whatever the consumer does.")
      .def(
          "wait_writer",
          [](SampleQueue& q, double timeout_s) {
            py::gil_scoped_release nogil;
            return q.wait_writer(timeout_s);
          },
          "After close(): waits up to timeout_s for the writer to log everything and close the "
          "log; True when it has (or none was started).",
          "timeout_s"_a)
      .def("abandon", &SampleQueue::abandon,
           "The consumer gives up: samples not taken yet (and any handed over later) count as "
           "gather_dropped; returns how many were waiting.")
      .def("set_log", &SampleQueue::set_log,
           "Every sample is appended to this file (the rank log) before the consumer gets it; "
           "'' for none.",
           "path"_a)
      .def_property_readonly("log_errors", &SampleQueue::log_errors,
                             "Failed rank-log writes so far (one per write of a batch).")
      .def_property_readonly("log_lost", &SampleQueue::log_lost,
                             "Samples whose rank-log write failed.")
      .def_property_readonly("logged", &SampleQueue::logged,
                             "Samples written to the rank log.")
      .def_property_readonly("log_error", &SampleQueue::log_error,
                             "Why the latest rank-log write failed.")
      .def_property_readonly("left_out", &SampleQueue::left_out,
                             "Non-finite stage times left out of the lines written.")
      .def("push", &SampleQueue::push, "sample"_a)
      .def("push_line", &SampleQueue::push_line, "step"_a, "line"_a)
      .def("mark_round", &SampleQueue::mark_round)
      .def("close", &SampleQueue::close)
      .def_property_readonly("pushed", &SampleQueue::pushed)
      .def_property_readonly("dropped", &SampleQueue::dropped,
                             "Samples dropped because the queue was full: in neither the log "
                             "nor the analysis.")
      .def_property_readonly("gather_dropped", &SampleQueue::gather_dropped,
                             "Samples in the rank log that the consumer never got (it was "
                             "stuck and its slots full, or it gave up).")
      .def_property_readonly("writer_done", &SampleQueue::writer_done)
      .def_property_readonly("rounds_total", &SampleQueue::rounds_total)
      .def_property_readonly("capacity", &SampleQueue::capacity)
      .def("__len__", &SampleQueue::size);

  py::class_<PyRecorder>(
      m, "Recorder",
      "Sampled stage timing for one training thread (not thread-safe). backend='cuda' asks for "
      "CUDA events; if that is not possible the host clock is used and backend_reason says why.")
      .def(py::init<int, int, int, int, std::string, std::string, int, const std::string&, int,
                    std::uint32_t>(),
           "interval"_a = 10, "rank"_a = 0, "world_size"_a = 1, "local_rank"_a = 0,
           "host"_a = "", "cohort"_a = "", "max_pending_steps"_a = 4, "backend"_a = "host",
           "device"_a = -1, "capacity"_a = 4096)
      .def(
          "stage",
          [](PyRecorder& r, const std::string& name, py::object kind) {
            return kind.is_none() ? r.rec().stage(name) : r.rec().stage(name, kind_from(kind));
          },
          "Registers (or finds) a stage; returns its id, -1 when all slots are taken.", "name"_a,
          "kind"_a = py::none())
      .def("begin_step", &PyRecorder::begin_step,
           "Starts a step; returns whether it is sampled.", "step"_a)
      .def("end_step", &PyRecorder::end_step)
      .def("begin", [](PyRecorder& r, int id) { r.rec().begin(id); }, "id"_a)
      .def("end", [](PyRecorder& r, int id) { r.rec().end(id); }, "id"_a)
      .def("cancel", [](PyRecorder& r, int id) { r.rec().cancel(id); },
           "Drops stage `id`'s open entry (begun by begin) without counting it.", "id"_a)
      .def(
          "add",
          [](PyRecorder& r, int id, double ms, std::uint32_t calls) { r.rec().add(id, ms, calls); },
          "id"_a, "ms"_a, "calls"_a = 1)
      .def("poll", [](PyRecorder& r) { r.rec().poll(); })
      .def("sampled", [](PyRecorder& r) { return r.rec().sampled(); })
      .def_property_readonly("step", [](PyRecorder& r) { return r.rec().step(); })
      .def_property_readonly("enabled", [](PyRecorder& r) { return r.rec().enabled(); })
      .def_property_readonly("counters", [](PyRecorder& r) { return counters_dict(r.rec().counters()); })
      .def_property_readonly("backend_name",
                             [](PyRecorder& r) { return std::string(r.rec().backend_name()); })
      .def_property_readonly("backend_reason", &PyRecorder::reason)
      .def(
          "set_stream",
          [](PyRecorder& r, std::uintptr_t handle) {
            if (TimingBackend* b = r.rec().backend()) b->set_stream(reinterpret_cast<void*>(handle));
          },
          "Device backends: records later marks on this stream (a CUstream as an int; 0 = the "
          "default stream). No-op on the host clock.",
          "handle"_a)
      .def(
          "section", [](py::object self, int id) { return new_handle(g_scope_type, self, id); },
          "A reusable context manager timing stage `id` (begin on enter, end on exit); keeps "
          "the recorder alive.",
          "id"_a)
      .def(
          "marks",
          [](py::object self, int id) {
            py::object h = new_handle(g_handle_type, self, id);
            return py::make_tuple(new_builtin(&kHotBegin, h), new_builtin(&kHotEnd, h));
          },
          "(begin, end): builtins that begin and end stage `id`, ignoring any arguments, so "
          "they can be hooks themselves. The training-thread form of begin(id)/end(id).",
          "id"_a)
      .def(
          "cancel_mark",
          [](py::object self, int id) {
            return new_builtin(&kHotCancel, new_handle(g_handle_type, self, id));
          },
          "A builtin that drops stage `id`'s open entry without counting it (the training-"
          "thread form of cancel(id)), ignoring any arguments.",
          "id"_a)
      .def(
          "step_calls",
          [](py::object self) {
            py::object h = new_handle(g_handle_type, self, -1);
            return py::make_tuple(new_builtin(&kHotBeginStep, h), new_builtin(&kHotEndStep, h),
                                  new_builtin(&kHotSetStream, h));
          },
          "(begin_step, end_step, set_stream): builtins, the training-thread form of the "
          "methods.")
      .def("attach_queue", &PyRecorder::attach, "Samples go to this queue (None: nowhere).",
           "queue"_a)
      .def_property_readonly("queue", &PyRecorder::queue);


  py::enum_<Reference>(m, "Reference")
      .value("mean", Reference::mean)
      .value("median", Reference::median)
      .value("robust", Reference::robust);

  py::enum_<Method>(m, "Method")
      .value("threshold", Method::threshold)
      .value("sequential", Method::sequential);

  py::class_<DetectorOptions>(m, "DetectorOptions",
                              "Detector settings; every argument left None takes the default "
                              "(docs/detection.md). DetectorOptions.preset('rfc', n) is the "
                              "RFC's rule.")
      .def(py::init([](py::object method, py::object ref, py::object rel, py::object abs_ms,
                       py::object mad_z, py::object k, py::object n, py::object budget) {
             DetectorOptions o;
             if (!method.is_none()) {
               if (py::isinstance<py::str>(method))
                 o.method = parse_method(method.cast<std::string>());
               else
                 o.method = method.cast<Method>();
             }
             if (!ref.is_none()) {
               if (py::isinstance<py::str>(ref))
                 o.ref = parse_reference(ref.cast<std::string>());
               else
                 o.ref = ref.cast<Reference>();
             }
             if (!rel.is_none()) o.relative_threshold = rel.cast<double>();
             if (!abs_ms.is_none()) o.absolute_ms_threshold = abs_ms.cast<double>();
             if (!mad_z.is_none()) o.mad_z = mad_z.cast<double>();
             if (!k.is_none()) o.confirm_k = k.cast<int>();
             if (!n.is_none()) o.confirm_n = n.cast<int>();
             if (!budget.is_none()) o.false_alarm_budget = budget.cast<double>();
             o.validate();
             return o;
           }),
           "method"_a = py::none(), "ref"_a = py::none(), "relative_threshold"_a = py::none(),
           "absolute_ms_threshold"_a = py::none(), "mad_z"_a = py::none(),
           "confirm_k"_a = py::none(), "confirm_n"_a = py::none(),
           "false_alarm_budget"_a = py::none())
      .def_static("preset", &DetectorOptions::preset, "name"_a, "world_size"_a,
                  "'default' (= 'recommended') or 'rfc' (the RFC's rule exactly)")
      .def_readwrite("method", &DetectorOptions::method)
      .def_readwrite("ref", &DetectorOptions::ref)
      .def_readwrite("relative_threshold", &DetectorOptions::relative_threshold)
      .def_readwrite("absolute_ms_threshold", &DetectorOptions::absolute_ms_threshold)
      .def_readwrite("mad_z", &DetectorOptions::mad_z)
      .def_readwrite("confirm_k", &DetectorOptions::confirm_k)
      .def_readwrite("confirm_n", &DetectorOptions::confirm_n)
      .def_readwrite("healthy_spread", &DetectorOptions::healthy_spread)
      .def_readwrite("pause_rate", &DetectorOptions::pause_rate)
      .def_readwrite("false_alarm_budget", &DetectorOptions::false_alarm_budget)
      .def_readwrite("budget_windows", &DetectorOptions::budget_windows)
      .def("describe", &describe_rule, "One line describing the rule, as reports print it")
      .def("validate", &DetectorOptions::validate);

  py::class_<Detector>(m, "Detector",
                       "Straggler analysis over a run's windows with persistence. Not "
                       "thread-safe; the analysis itself runs with the GIL released.")
      .def(py::init<DetectorOptions>(), "options"_a = DetectorOptions{})
      .def(
          "observe",
          [](Detector& d, std::vector<StepSample> samples, std::optional<std::int64_t> step,
             int local_rank) {
            Window w = make_window(std::move(samples), step);
            Report r;
            {
              py::gil_scoped_release nogil;
              r = d.observe(w);
            }
            return report_dict(r, local_rank);
          },
          "Analyses one window (every rank's sample of one step); returns the report as a dict "
          "with 'metrics' (straggler/*) for local_rank.",
          "samples"_a, "step"_a = py::none(), "local_rank"_a = 0)
      .def(
          "observe_lines",
          [](Detector& d, std::vector<std::string> lines, std::optional<std::int64_t> step,
             int local_rank) {
            Report r;
            std::vector<std::string> errors;
            {
              py::gil_scoped_release nogil;
              SampleParser parser;
              std::vector<StepSample> samples;
              samples.reserve(lines.size());
              std::string error;
              for (const std::string& line : lines) {
                StepSample s;
                if (parser.parse(line, s, error))
                  samples.push_back(std::move(s));
                else
                  errors.push_back(error);
              }
              Window w = make_window(std::move(samples), step);
              r = d.observe(w);
            }
            py::dict out = report_dict(r, local_rank);
            out["parse_errors"] = errors;
            return out;
          },
          "observe() over laggard.sample/1 JSON lines; malformed lines are left out and listed "
          "in 'parse_errors'.",
          "lines"_a, "step"_a = py::none(), "local_rank"_a = 0)
      .def(
          "confirmed",
          [](const Detector& d) {
            py::list out;
            for (const auto& c : d.confirmed()) {
              py::dict f = finding_dict(c.finding);
              f["first_confirmed_step"] = c.first_confirmed_step;
              f["first_flagged_step"] = c.first_flagged_step;
              f["windows_seen"] = c.windows_seen;
              out.append(f);
            }
            return out;
          },
          "Findings confirmed so far (latest figures of each rank and stage).")
      .def_property_readonly("windows", &Detector::windows)
      .def_property_readonly("options", &Detector::options);

  py::class_<LiveDetector>(m, "LiveDetector",
                           "The analysis rank's per-window step of the live analysis "
                           "(laggard.live): parse, detect, live metrics and the reports.jsonl "
                           "line in one call without the GIL.")
      .def(py::init<const DetectorOptions&, int, const std::string&>(), "options"_a,
           "local_rank"_a = 0, "report_log"_a = "")
      .def(
          "observe_lines",
          [](LiveDetector& d, const std::vector<std::string>& lines, std::int64_t step,
             double report_errors, double dropped_samples, double incomplete_windows,
             bool metrics) {
            LiveDetector::Result r;
            {
              py::gil_scoped_release nogil;
              r = d.observe(lines, step, report_errors, dropped_samples, incomplete_windows);
            }
            return py::make_tuple(
                metrics ? py::object(metrics_dict(r.metrics)) : py::none(), r.parse_errors,
                r.log_error.empty() ? py::none() : py::object(py::str(r.log_error)));
          },
          "Analyses one window given as sample JSON lines; returns (metrics or None, malformed "
          "lines, report-log error or None). The metrics include straggler/num_confirmed, "
          "confirmed, report_errors, dropped_samples and incomplete_windows (the values given). "
          "With a report_log path given at construction, the window's reports.jsonl line is "
          "appended there.",
          "lines"_a, "step"_a, "report_errors"_a = 0.0, "dropped_samples"_a = 0.0,
          "incomplete_windows"_a = 0.0, "metrics"_a = true)
      .def(
          "observe_batch",
          [](LiveDetector& d, py::list windows, double report_errors, double dropped_samples,
             bool metrics) {
            // Converted while holding the GIL, analysed without it, in one call: the side
            // channel's turn takes the GIL back once, not once per window.
            struct In {
              std::int64_t step;
              std::vector<std::string> lines;
              double incomplete;
            };
            std::vector<In> in;
            in.reserve(py::len(windows));
            for (py::handle w : windows) {
              auto t = w.cast<py::tuple>();
              if (t.size() != 3)
                throw py::value_error("observe_batch: each window is (step, lines, incomplete)");
              in.push_back({t[0].cast<std::int64_t>(), t[1].cast<std::vector<std::string>>(),
                            t[2].cast<double>()});
            }
            std::vector<Metrics> out_metrics;
            std::size_t parse_errors = 0;
            std::size_t log_failures = 0;
            std::string log_error;
            {
              py::gil_scoped_release nogil;
              if (metrics) out_metrics.reserve(in.size());
              for (const In& w : in) {
                // A window's report_errors also counts the report-log writes that failed for
                // the windows before it in this batch, as it would one call at a time.
                LiveDetector::Result r =
                    d.observe(w.lines, w.step, report_errors + static_cast<double>(log_failures),
                              dropped_samples, w.incomplete);
                parse_errors += r.parse_errors;
                if (!r.log_error.empty()) {
                  ++log_failures;
                  log_error = std::move(r.log_error);
                }
                if (metrics) out_metrics.push_back(std::move(r.metrics));
              }
            }
            py::object listed = py::none();
            if (metrics) {
              py::list l;
              for (const Metrics& window : out_metrics) l.append(metrics_dict(window));
              listed = std::move(l);
            }
            return py::make_tuple(listed, parse_errors, log_failures,
                                  log_error.empty() ? py::none() : py::object(py::str(log_error)));
          },
          "observe_lines over several windows in step order, in one call (the GIL released "
          "once): windows of (step, lines, incomplete_windows). Returns (a list of each "
          "window's metrics, or None when metrics is false; malformed lines in all; failed "
          "report-log writes; the last one's error, or None).",
          "windows"_a, "report_errors"_a = 0.0, "dropped_samples"_a = 0.0, "metrics"_a = true)
      .def("latest_report", &LiveDetector::report,
           "The latest window's full report (as Detector.observe returns it), or None.")
      .def("latest_metrics", &LiveDetector::latest_metrics,
           "The latest window's metrics ({} before the first).")
      .def("close_log", &LiveDetector::close_log, "Closes the report log.")
      .def_property_readonly(
          "windows", [](const LiveDetector& d) { return d.detector().windows(); });

  m.def(
      "evaluate_window",
      [](std::vector<StepSample> samples, const DetectorOptions& options,
         std::optional<std::int64_t> step, int local_rank) {
        Window w = make_window(std::move(samples), step);
        Report r;
        {
          py::gil_scoped_release nogil;
          r = evaluate_window(w, options);
        }
        return report_dict(r, local_rank);
      },
      "The RFC rule for one window, without persistence.", "samples"_a,
      "options"_a = DetectorOptions{}, "step"_a = py::none(), "local_rank"_a = 0);

  m.def(
      "first_regression",
      [](const std::vector<double>& baseline, const std::vector<double>& current,
         double relative_threshold) -> py::object {
        auto r = first_regression(baseline, current, relative_threshold);
        if (!r) return py::none();
        return py::make_tuple(r->index, r->delta);
      },
      "The first stage (pipeline order) slower than baseline by the threshold: (index, delta) "
      "or None. ValueError on unequal lengths.",
      "baseline"_a, "current"_a, "relative_threshold"_a = 0.05);

  m.def(
      "read_run",
      [](const std::string& run_dir) {
        std::vector<Window> windows;
        RunStats stats;
        {
          py::gil_scoped_release nogil;
          RunReader reader(run_dir);
          Window w;
          while (reader.next(w)) windows.push_back(w);
          stats = reader.stats();
        }
        py::list out;
        for (Window& w : windows) out.append(py::make_tuple(w.step, std::move(w.samples)));
        py::list errors;
        for (const LineError& e : stats.errors) errors.append(e.message());
        py::dict s("files"_a = stats.files, "samples"_a = stats.samples,
                   "malformed"_a = stats.malformed, "duplicates"_a = stats.duplicates,
                   "out_of_order"_a = stats.out_of_order, "windows"_a = stats.windows,
                   "errors"_a = errors);
        return py::make_tuple(out, s);
      },
      "Reads RUN_DIR/rank-*.jsonl as the CLI does: ([(step, [StepSample])], stats).",
      "run_dir"_a);

  m.def(
      "should_log_cuda_fallback",
      [](const std::string& reason) { return should_log_cuda_fallback(reason); },
      "True the first time this reason is seen in the process.", "reason"_a);
}
