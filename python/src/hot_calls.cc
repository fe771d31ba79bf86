// The training thread's calls into laggard: CPython builtins and one context-manager type.
#include "bindings.hpp"

#include <structmember.h>
#include <time.h>

#include <cstddef>

#include <array>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace laggard::py_bindings {
namespace {

// Training-thread calls without pybind11's dispatcher.
//
// A pybind11 call is cheap in a loop (~0.5 µs) but not on a training thread: a training step
// evicts the CPU caches, and the first call after it runs pybind11's generic dispatcher (function
// record, argument casters, overload loop) from cold memory, ~8 µs more than a plain CPython
// builtin (measured in bench/cold_calls.py). Sampled steps make ~10 such calls, so the calls the
// training thread makes on a sampled step — the recorder's begin_step/end_step/set_stream, a
// stage's begin and end, a section's __enter__/__exit__ — are CPython builtins and one small
// context-manager type written against the C API. Each holds a strong reference to its owner
// (a _core.Recorder or a _core.Engine).

/// What the builtins are bound to (their `self`): the recorder and one stage id.
struct HotHandle {
  PyObject_HEAD
  PyObject* owner;  // the _core.Recorder or _core.Engine, kept alive
  HotTarget* target;
  int id;
};

void hot_handle_dealloc(PyObject* self) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  Py_XDECREF(h->owner);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);  // heap type instances own a reference to their type
}

LAGGARD_HOT PyObject* hot_begin(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  h->target->rec().begin(h->id);
  Py_RETURN_NONE;
}

LAGGARD_HOT PyObject* hot_end(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  h->target->rec().end(h->id);
  Py_RETURN_NONE;
}

PyObject* hot_cancel(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  h->target->rec().cancel(h->id);
  Py_RETURN_NONE;
}

PyObject* hot_begin_step(PyObject* self, PyObject* arg) {
  const long long step = PyLong_AsLongLong(arg);
  if (step == -1 && PyErr_Occurred()) return nullptr;
  if (step < 0) {  // the log format has no negative steps; no C++ exception may cross here
    PyErr_Format(PyExc_ValueError, "begin_step(%lld): the step must be >= 0; this step is not "
                 "sampled", step);
    return nullptr;
  }
  const bool sampled = reinterpret_cast<HotHandle*>(self)->target->begin_step(step);
  return PyBool_FromLong(sampled);
}

PyObject* hot_end_step(PyObject* self, PyObject*) {
  reinterpret_cast<HotHandle*>(self)->target->end_step();
  Py_RETURN_NONE;
}

PyObject* hot_set_stream(PyObject* self, PyObject* arg) {
  const unsigned long long handle = PyLong_AsUnsignedLongLong(arg);
  if (handle == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
  if (TimingBackend* b = reinterpret_cast<HotHandle*>(self)->target->rec().backend())
    b->set_stream(reinterpret_cast<void*>(static_cast<std::uintptr_t>(handle)));
  Py_RETURN_NONE;
}

// Each (str, number) pair of a tuple or list, as fn(name, value); false with TypeError (naming
// `what` and the item) at the first item that is not one, the pairs before it taken.
template <class Fn>
bool each_pair(PyObject* arg, const char* not_a_sequence, const char* what, Fn&& fn) {
  PyObject* seq = PySequence_Fast(arg, not_a_sequence);
  if (!seq) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* pair = items[i];
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_TypeError, "%s: item %zd is not a (str, number) tuple", what, i);
      return false;
    }
    Py_ssize_t size = 0;
    const char* name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &size);
    const double value = name ? PyFloat_AsDouble(PyTuple_GET_ITEM(pair, 1)) : 0.0;
    if (!name || (value == -1.0 && PyErr_Occurred())) {
      Py_DECREF(seq);
      return false;
    }
    fn(std::string_view(name, static_cast<std::size_t>(size)), value);
  }
  Py_DECREF(seq);
  return true;
}

// record_resources(pairs): each (name, value) of a tuple (or list) into the sampled step's
// `resources`, in one call (laggard.resources hands over ~30 readings per sampled step: as
// pybind11 calls, ~27 µs right after a training step; bench/resources_overhead.py). A pair that
// is not (str, number) raises TypeError; the pairs before it are recorded.
PyObject* hot_record_resources(PyObject* self, PyObject* arg) {
  Recorder& rec = reinterpret_cast<HotHandle*>(self)->target->rec();
  if (!each_pair(arg, "record_resources: expected a tuple of (name, value)", "record_resources",
                 [&](std::string_view name, double value) { rec.record_resource(name, value); }))
    return nullptr;
  Py_RETURN_NONE;
}

// defer(name) -> int: Recorder::defer, the token (0: nothing deferred).
PyObject* hot_defer(PyObject* self, PyObject* arg) {
  Py_ssize_t size = 0;
  const char* name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, &size) : nullptr;
  if (!name) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "defer: the name must be a str");
    return nullptr;
  }
  const Recorder::DeferToken token = reinterpret_cast<HotHandle*>(self)->target->rec().defer(
      std::string_view(name, static_cast<std::size_t>(size)));
  return PyLong_FromUnsignedLongLong(token);
}

// resolve(token, value) -> bool: Recorder::resolve.
PyObject* hot_resolve(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "resolve(token, value) takes 2 arguments");
    return nullptr;
  }
  const unsigned long long token = PyLong_AsUnsignedLongLong(args[0]);
  if (token == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
  const double value = PyFloat_AsDouble(args[1]);
  if (value == -1.0 && PyErr_Occurred()) return nullptr;
  return PyBool_FromLong(
      reinterpret_cast<HotHandle*>(self)->target->rec().resolve(token, value));
}

// A SectionScope: a HotHandle that is its own __enter__ and __exit__. `with` looks both up on
// the scope's type at every entry, and a method descriptor there binds a new method object to
// the scope each time (allocated, GC-tracked, freed after the call: ~300 instructions and the
// allocator's cold memory per section, right after a training step). The scope's class holds
// two ScopeCall descriptors instead, whose __get__ on a scope returns the scope itself, and the
// scope is callable (vectorcall): no argument begins the stage (__enter__(), returns None), the
// exit's arguments end it (__exit__(type, value, tb), returns False: exceptions of the with-body
// pass through). Nothing is allocated per `with`.
struct HotScope {
  HotHandle h;
  vectorcallfunc call;  // scope_call (the __vectorcalloffset__ member)
};

LAGGARD_HOT PyObject* scope_call(PyObject* self, PyObject* const*, size_t nargsf,
                                 PyObject* kwnames) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  if (PyVectorcall_NARGS(nargsf) == 0 && kwnames == nullptr) {
    h->target->rec().begin(h->id);
    Py_RETURN_NONE;
  }
  h->target->rec().end(h->id);
  Py_RETURN_FALSE;
}

LAGGARD_HOT PyObject* hot_enter(PyObject* self, PyObject*) { return hot_begin(self, nullptr, 0); }

LAGGARD_HOT PyObject* hot_exit(PyObject* self, PyObject* const*, Py_ssize_t) {
  reinterpret_cast<HotHandle*>(self)->target->rec().end(reinterpret_cast<HotHandle*>(self)->id);
  Py_RETURN_FALSE;  // exceptions of the with-body pass through
}

PyTypeObject* g_scope_type = nullptr;  // set at module init, alive as long as the module

// SectionScope.__enter__ / __exit__ (a ScopeCall each): on a scope, the scope itself (see
// HotScope); on the class, the descriptor, which called with a scope first (contextlib's
// ExitStack calls type(cm).__enter__(cm)) begins or ends its stage.
struct ScopeCall {
  PyObject_HEAD
  bool exit;
};

PyObject* scope_call_get(PyObject* self, PyObject* obj, PyObject*) {
  return Py_NewRef(obj == nullptr || obj == Py_None ? self : obj);
}

PyObject* scope_call_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  const bool exit = reinterpret_cast<ScopeCall*>(self)->exit;
  PyObject* scope = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : nullptr;
  if (scope == nullptr || Py_TYPE(scope) != g_scope_type || (kwargs && PyDict_GET_SIZE(kwargs))) {
    PyErr_Format(PyExc_TypeError, "SectionScope.%s needs a SectionScope as its first argument",
                 exit ? "__exit__" : "__enter__");
    return nullptr;
  }
  return exit ? hot_exit(scope, nullptr, 0) : hot_enter(scope, nullptr);
}

void scope_call_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// The Analyzer's per-instance `section(name, kind=None)`: two builtins whose `self` is a tuple
// (what to return or where to look, the Python fallback). On a step that is not sampled, one
// that returns the shared no-op section; on a sampled one, one that returns the name's
// SectionScope from the Analyzer's dict. Anything else (a new name, an unhashable one, other
// arguments) goes to the fallback, the Analyzer's Python section(). Neither makes a Python frame:
// right after a training step, each Python call saved is a cold frame saved.
bool section_args_ok(Py_ssize_t nargs, PyObject* kwnames) {
  if (kwnames == nullptr) return nargs == 1 || nargs == 2;
  return nargs == 1 && PyTuple_GET_SIZE(kwnames) == 1 &&
         PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "kind") == 0;
}

LAGGARD_HOT PyObject* noop_section(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                       PyObject* kwnames) {
  if (section_args_ok(nargs, kwnames)) {
    PyObject* noop = PyTuple_GET_ITEM(self, 0);
    Py_INCREF(noop);
    return noop;
  }
  return PyObject_Vectorcall(PyTuple_GET_ITEM(self, 1), args, nargs, kwnames);
}

LAGGARD_HOT PyObject* sampled_section(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                          PyObject* kwnames) {
  if (section_args_ok(nargs, kwnames)) {
    PyObject* hit = PyDict_GetItemWithError(PyTuple_GET_ITEM(self, 0), args[0]);
    if (hit != nullptr) {
      Py_INCREF(hit);
      return hit;
    }
    PyErr_Clear();  // an unhashable name: the fallback counts it
  }
  return PyObject_Vectorcall(PyTuple_GET_ITEM(self, 1), args, nargs, kwnames);
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
PyMethodDef kHotRecordResources = {
    "record_resources", hot_record_resources, METH_O,
    "Records each (name, value) of a tuple into the sampled step's resources."};
PyMethodDef kHotDefer = {"defer", hot_defer, METH_O,
                         "Promises a value of `name` to the sampled step; returns its token "
                         "(0: nothing deferred)."};
PyMethodDef kHotResolve = {
    "resolve", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hot_resolve)),
    METH_FASTCALL, "Gives a deferred value: resolve(token, value) -> whether it was attached."};
PyMethodDef kHotSetStream = {"set_stream", hot_set_stream, METH_O,
                             "Device backends: later marks go on this stream (an int handle)."};

PyMethodDef kNoopSection = {
    "section", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(noop_section)),
    METH_FASTCALL | METH_KEYWORDS,
    "section(name, kind=None): the shared no-op section (a step that is not sampled)."};
PyMethodDef kSampledSection = {
    "section", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(sampled_section)),
    METH_FASTCALL | METH_KEYWORDS,
    "section(name, kind=None): the name's section scope (a sampled step)."};

PyGetSetDef kScopeGetSet[] = {{"id", hot_scope_id, nullptr, "The stage id.", nullptr},
                              {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot kHandleSlots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(hot_handle_dealloc)},
                              {Py_tp_doc, const_cast<char*>("A recorder and a stage id, bound to "
                                                            "laggard's training-thread builtins.")},
                              {0, nullptr}};
PyType_Spec kHandleSpec = {"laggard._core.RecorderHandle", sizeof(HotHandle), 0,
                           Py_TPFLAGS_DEFAULT, kHandleSlots};
PyMemberDef kScopeMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, static_cast<Py_ssize_t>(offsetof(HotScope, call)),
     READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};
PyType_Slot kScopeSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(hot_handle_dealloc)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_members, kScopeMembers},
    {Py_tp_getset, kScopeGetSet},
    {Py_tp_doc, const_cast<char*>("Context manager of one stage (Recorder.section): begin on "
                                  "enter, end on exit. Its __enter__ and __exit__ are the scope "
                                  "itself: called with no argument it begins the stage, with "
                                  "__exit__'s arguments it ends it.")},
    {0, nullptr}};
PyType_Spec kScopeSpec = {"laggard._core.SectionScope", sizeof(HotScope), 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kScopeSlots};
PyType_Slot kScopeCallSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(scope_call_dealloc)},
    {Py_tp_descr_get, reinterpret_cast<void*>(scope_call_get)},
    {Py_tp_call, reinterpret_cast<void*>(scope_call_call)},
    {Py_tp_doc, const_cast<char*>("SectionScope.__enter__/__exit__: the scope itself on a scope.")},
    {0, nullptr}};
PyType_Spec kScopeCallSpec = {"laggard._core.ScopeCall", sizeof(ScopeCall), 0,
                              Py_TPFLAGS_DEFAULT, kScopeCallSlots};

PyTypeObject* g_handle_type = nullptr;  // set at module init, alive as long as the module

py::object new_handle(PyTypeObject* type, const py::object& owner, HotTarget& target, int id) {
  PyObject* obj = type->tp_alloc(type, 0);
  if (!obj) throw py::error_already_set();
  auto* h = reinterpret_cast<HotHandle*>(obj);
  h->owner = owner.inc_ref().ptr();
  h->target = &target;
  h->id = id;
  return py::reinterpret_steal<py::object>(obj);
}

py::object new_builtin(PyMethodDef* def, const py::object& handle) {
  PyObject* fn = PyCFunction_NewEx(def, handle.ptr(), nullptr);
  if (!fn) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
}


// The Analyzer's step in one call each way: StepState's begin_step and end_step builtins stand in
// the Analyzer's instance dict (laggard/analyzer.py puts them there while its configuration
// allows: the host clock, no verdict callbacks), so that a step makes no Python frame of
// laggard's. They do what Analyzer.begin_step/end_step and laggard.resources' training-thread
// half did in Python: the recorder's calls, the instance's `step`, `_sampled` and `section`, the
// GC callback in gc.callbacks during a sampled step, the step's GC and data-wait figures and the
// latest published readings into the sample, the sampler's period, and laggard.torch's
// attach/detach calls. The readings themselves are read on the sampler thread, which publishes
// them here (publish); the training thread copies doubles. Anything out of the ordinary (a step
// that is not an exact non-negative int) goes to the Python method.
struct alignas(64) StepData {
  // The published readings, in order, each with its slot in the recorder's resources once an
  // end_step has registered the name (kUnknownSlot before): a sampled step copies doubles into
  // slots and compares no name. Laid out by what a sampled step touches (right after a training
  // step each cache line is a miss): its flags, slots and times in the first line; the readings'
  // slots and values (parallel arrays: one line of slots, a line per 8 values) and the data
  // wait after; the names, read when a name is new, last.
  static constexpr int kUnknownSlot = -2;
  bool resources = false, gc_attached = false;
  bool has_latest = false, has_last_sampled = false;
  bool has_wait_before = false, has_wait_in_step = false;
  bool fixed_period = false;  // the period was given: period_s does not move
  bool unresolved = false;    // a published name has no slot yet (registered at end_step)
  std::int8_t gc_pause_slot = kUnknownSlot, gc_collections_slot = kUnknownSlot;
  std::int8_t data_wait_slot = kUnknownSlot;
  double latest_t = 0.0;  // when (time.monotonic)
  double period_s = 1.0, min_period_s = 1.0, max_period_s = 5.0;
  double last_sampled = 0.0;

  std::vector<std::int8_t> slots;  // Recorder::kMaxValues fits
  std::vector<double> values;
  double wait_before_ms = 0.0, wait_in_step_ms = 0.0;
  std::vector<std::string> names;
};
static_assert(Recorder::kMaxValues < 127, "a resource slot fits an int8_t");

// GcWatch's callback in C: gc.callbacks calls it with (phase, info) during a sampled step; it
// keeps the collections' pause (start to stop) and count. A pause that starts on another thread
// also stops the training thread (it holds the GIL), so every collection counts. Its own object
// (no reference back to the StepState), so that nothing here makes a reference cycle.
struct GcPauses {
  PyObject_HEAD
  double pause_s;
  double started;
  double collections;
  bool running;
};

double monotonic_s() noexcept;

PyObject* gc_pauses_call(PyObject* self, PyObject* args, PyObject*) {
  auto* g = reinterpret_cast<GcPauses*>(self);
  PyObject* phase = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : nullptr;
  if (phase == nullptr || !PyUnicode_Check(phase)) Py_RETURN_NONE;
  if (PyUnicode_CompareWithASCIIString(phase, "start") == 0) {
    g->started = monotonic_s();
    g->running = true;
  } else if (g->running) {
    g->pause_s += monotonic_s() - g->started;
    g->running = false;
    g->collections += 1.0;
  }
  Py_RETURN_NONE;
}

void gc_pauses_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyType_Slot kGcPausesSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(gc_pauses_dealloc)},
    {Py_tp_call, reinterpret_cast<void*>(gc_pauses_call)},
    {Py_tp_doc, const_cast<char*>("The GC callback of a sampled step: pauses and collections.")},
    {0, nullptr}};
PyType_Spec kGcPausesSpec = {"laggard._core.GcPauses", sizeof(GcPauses), 0, Py_TPFLAGS_DEFAULT,
                             kGcPausesSlots};
PyTypeObject* g_gc_pauses_type = nullptr;

struct StepState {
  PyObject_HEAD
  // What every step reads (a step that is not sampled touches these alone), then what a
  // sampled one adds: right after a training step each cache line is a miss.
  HotTarget* target;
  long long step_k;       // the step begun last, an exact int >= 0; -1: `step` holds it
  long long skip_every;   // host clock: steps not sampled need no recorder call; -1: none
  bool sampled;           // the recorder's, as the builtins left it: no cold read of it
  bool dict_sampled;      // `_sampled` is a plain instance attribute: stored into the dict
  PyObject* step;         // the step begun last when it is not an exact int >= 0 (else null)
  PyObject* noop;         // what section() returns on a step that is not sampled
  // (a step that is not sampled reads the fields above alone: 48 bytes)
  Analyzer* an_cpp;       // target's Analyzer (begin_step/end_step straight on it), or null
  Recorder* rec;          // target's recorder (its lines prefetched)
  StepData* d;
  PyObject* an_ref;       // a weak reference to the Analyzer
  PyObject* sections;
  PyObject* gc_list;      // gc.callbacks, with resources and GC pauses
  PyObject* gc_cb;        // a GcPauses, in gc.callbacks during a sampled step
  PyObject* on_begin;     // list: calls at a sampled step's begin (laggard.torch's attach)
  PyObject* on_end;       // list: at its end (detach)
  PyObject* find_cuda;    // ResourceSampler._find_cuda_device until it has found the device
  PyObject* owner;        // the _core.Engine (or Recorder), kept alive
  PyObject* begin_py;     // Analyzer.begin_step / end_step: the unusual cases
  PyObject* end_py;
  PyObject* report;       // report(kind, exception)
  PyObject* section_on;   // the Analyzer's section() builtins (sampled, not sampled)
  PyObject* section_off;
  PyObject* section_py;   // the Analyzer's Python section(): new names, other arguments
};

PyObject* step_begin_step(PyObject* self, PyObject* step);
PyObject* step_end_step(PyObject* self, PyObject*);
PyObject* step_section(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                       PyObject* kwnames);
PyMethodDef kStepBegin = {"begin_step", step_begin_step, METH_O,
                          "Analyzer.begin_step(step), in one call."};
PyMethodDef kStepEnd = {"end_step", step_end_step, METH_NOARGS,
                        "Analyzer.end_step(), in one call."};
PyMethodDef kStepSection = {
    "section", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(step_section)),
    METH_FASTCALL | METH_KEYWORDS,
    "section(name, kind=None): the no-op section, or on a sampled step the name's scope."};

PyObject* g_k_step = nullptr;  // interned attribute names
PyObject* g_k_sampled = nullptr;
PyObject* g_k_section = nullptr;

LAGGARD_HOT double monotonic_s() noexcept {  // time.monotonic()'s and time.perf_counter()'s clock
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The exception being raised, handed to report(kind, exception); nothing raises from here.
LAGGARD_COLD void report_raised(StepState* s, const char* kind) {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != nullptr && tb != nullptr) PyException_SetTraceback(value, tb);
  if (s->report != nullptr && value != nullptr) {
    PyObject* r = PyObject_CallFunction(s->report, "sO", kind, value);
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

// Analyzer._call_hooks: a true result or an exception is counted, never raised.
LAGGARD_COLD void call_hooks(StepState* s, PyObject* hooks, const char* where, const char* done) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(hooks); ++i) {
    PyObject* fn = PyList_GET_ITEM(hooks, i);
    Py_INCREF(fn);
    PyObject* r = PyObject_CallNoArgs(fn);
    Py_DECREF(fn);
    int failed = r == nullptr ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    if (failed < 0) {
      report_raised(s, where);
    } else if (failed) {
      PyErr_Format(PyExc_RuntimeError, "laggard.torch: some hooks could not be %s", done);
      report_raised(s, where);
    }
  }
}

void set_attr(PyObject* an, PyObject* name, PyObject* value) {
  if (PyObject_SetAttr(an, name, value) < 0) PyErr_Clear();
}

LAGGARD_HOT // an._sampled = value. Where the Analyzer's class has nothing of that name and the default
// __setattr__ (checked when the StepState is made), straight into the instance dict: what
// PyObject_SetAttr would do, without its type lookup (cold code after a training step).
LAGGARD_HOT void set_sampled(StepState* s, PyObject* an, PyObject* value) {
#if PY_VERSION_HEX < 0x030D0000
  if (LAGGARD_LIKELY(s->dict_sampled)) {
    PyObject** dict = _PyObject_GetDictPtr(an);
    if (LAGGARD_LIKELY(dict != nullptr && *dict != nullptr && PyDict_CheckExact(*dict))) {
      if (PyDict_SetItem(*dict, g_k_sampled, value) < 0) PyErr_Clear();
      return;
    }
  }
#endif
  set_attr(an, g_k_sampled, value);
}

LAGGARD_HOT void gc_attach(StepState* s) {
  StepData& d = *s->d;
  if (!d.resources || d.gc_attached || s->gc_list == nullptr) return;
  auto* g = reinterpret_cast<GcPauses*>(s->gc_cb);
  g->pause_s = g->collections = 0.0;
  g->running = false;
  // gc.callbacks.append(cb): in place where the list has room (what list.append does, without
  // its code, cold after a training step), else through PyList_Append.
  auto* list = reinterpret_cast<PyListObject*>(s->gc_list);
  const Py_ssize_t n = Py_SIZE(list);
  if (LAGGARD_LIKELY(n < list->allocated)) {
    list->ob_item[n] = Py_NewRef(s->gc_cb);
    Py_SET_SIZE(list, n + 1);
  } else if (PyList_Append(s->gc_list, s->gc_cb) < 0) {
    PyErr_Clear();
    return;
  }
  d.gc_attached = true;
}

// Takes the GC callback out (wherever it is now: someone may have cleared gc.callbacks).
LAGGARD_HOT bool gc_detach(StepState* s) {
  StepData& d = *s->d;
  if (!d.gc_attached) return false;
  d.gc_attached = false;
  auto* list = reinterpret_cast<PyListObject*>(s->gc_list);
  const Py_ssize_t n = Py_SIZE(list);
  if (LAGGARD_LIKELY(n > 0 && list->ob_item[n - 1] == s->gc_cb)) {
    // Still the last (as a sampled step leaves it): shortened in place, as list.pop() does
    // (the allocation kept for the next append). The list still holds gc_cb's reference here.
    Py_SET_SIZE(list, n - 1);
    Py_DECREF(s->gc_cb);
    return true;
  }
  for (Py_ssize_t i = n - 1; i >= 0; --i)
    if (PyList_GET_ITEM(s->gc_list, i) == s->gc_cb) {
      if (PyList_SetSlice(s->gc_list, i, i + 1, nullptr) < 0) PyErr_Clear();
      break;
    }
  return true;
}

void resources_begin(StepState* s) { gc_attach(s); }

// A reading into the sampled step by its slot, the name registered (in the order of first
// sight, as record_resource does) the first time; a name without a slot (kMaxValues taken) is
// tried, and counted, again each step, as record_resource counts it.
LAGGARD_HOT void record_at(Recorder& rec, std::int8_t& slot, std::string_view name,
                           double value) noexcept {
  if (LAGGARD_UNLIKELY(slot == StepData::kUnknownSlot)) {
    const int got = rec.resource_slot(name);
    if (got < 0) return;
    slot = static_cast<std::int8_t>(got);
  }
  rec.record_resource_at(slot, value);
}

// The published readings whose names have no slot yet get one, in their order (as record_at
// would, one at a time): a new publish's names, once; a name that finds no slot (kMaxValues
// taken) is tried, and counted, again at each sampled step.
LAGGARD_COLD void resolve_slots(Recorder& rec, StepData& d) noexcept {
  bool left = false;
  for (std::size_t i = 0; i < d.slots.size(); ++i) {
    if (d.slots[i] != StepData::kUnknownSlot) continue;
    const int got = rec.resource_slot(d.names[i]);
    if (got < 0)
      left = true;
    else
      d.slots[i] = static_cast<std::int8_t>(got);
  }
  d.unresolved = left;
}

// Until the training thread's CUDA device is known: the sampler's _find_cuda_device.
LAGGARD_COLD void find_cuda(StepState* s) {
  PyObject* r = PyObject_CallNoArgs(s->find_cuda);
  const int found = r == nullptr ? -1 : PyObject_IsTrue(r);
  Py_XDECREF(r);
  if (found < 0) report_raised(s, "resources");
  if (found != 0) Py_CLEAR(s->find_cuda);
}

// A sampled step's resources, into the recorder before its end_step (in the order
// ResourceSampler.step_end hands them over): the GC figures, the data wait, the latest
// readings unless stale (the sampler has not published for 4 periods and at least 5 s); then
// the period follows the time between sampled steps. `now`: time.monotonic(). With `out`, the
// latest readings are not recorded here but left in `out` for the recorder's end_step, which
// copies them last, straight into the ring (the caller ends the step before anything can
// publish again), and the caller looks for the CUDA device after that.
LAGGARD_HOT void resources_end(StepState* s, double now, Recorder::SlotReadings* out) {
  StepData& d = *s->d;
  if (!d.resources) return;
  Recorder& rec = *s->rec;
  if (gc_detach(s)) {
    const auto* g = reinterpret_cast<GcPauses*>(s->gc_cb);
    record_at(rec, d.gc_pause_slot, "host_gc_pause_ms", g->pause_s * 1000.0);
    record_at(rec, d.gc_collections_slot, "host_gc_collections", g->collections);
  }
  if (d.has_wait_in_step || d.has_wait_before) {
    record_at(rec, d.data_wait_slot, "host_data_wait_ms",
              d.has_wait_in_step ? d.wait_in_step_ms : d.wait_before_ms);
    d.has_wait_in_step = d.has_wait_before = false;
  }
  if (d.has_latest) {
    const double stale_s = 4.0 * d.period_s;
    if (now - d.latest_t <= (stale_s > 5.0 ? stale_s : 5.0)) {
      if (LAGGARD_UNLIKELY(d.unresolved)) resolve_slots(rec, d);
      // Slots and values only: no name is read (a slot < 0 records nothing).
      const std::int8_t* slots = d.slots.data();
      const double* values = d.values.data();
      if (out != nullptr) {
        *out = Recorder::SlotReadings{slots, values, d.slots.size()};
      } else {
        for (std::size_t i = 0, n = d.slots.size(); i < n; ++i)
          rec.record_resource_at(slots[i], values[i]);
      }
    }
  }
  if (LAGGARD_UNLIKELY(s->find_cuda != nullptr) && out == nullptr) find_cuda(s);
  const bool had_last = d.has_last_sampled;
  const double last = d.last_sampled;
  d.last_sampled = now;
  d.has_last_sampled = true;
  if (had_last && !d.fixed_period) {
    const double period = 0.8 * d.period_s + 0.2 * (now - last);
    d.period_s = period < d.min_period_s   ? d.min_period_s
                 : period > d.max_period_s ? d.max_period_s
                                           : period;
  }
}

PyObject* call_python(PyObject* fn, PyObject* an, PyObject* arg) {
  PyObject* args[2] = {an, arg};
  return PyObject_Vectorcall(fn, args, arg ? 2 : 1, nullptr);
}

// An exact int >= 0 that fits a long long: its value; else -1. A step below 2**30 is read from
// the object (no call into the interpreter's long code, cold after a training step).
LAGGARD_HOT inline long long exact_step(PyObject* step) noexcept {
  if (!PyLong_CheckExact(step)) return -1;
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
  // 3.11's PyLongObject: the sign and the number of digits in ob_size, 30-bit digits.
  const Py_ssize_t size = Py_SIZE(step);
  if (size == 0) return 0;
  if (size == 1) return static_cast<long long>(reinterpret_cast<PyLongObject*>(step)->ob_digit[0]);
#elif PY_VERSION_HEX >= 0x030C0000
  if (PyUnstable_Long_IsCompact(reinterpret_cast<PyLongObject*>(step))) {
    const Py_ssize_t v = PyUnstable_Long_CompactValue(reinterpret_cast<PyLongObject*>(step));
    return v < 0 ? -1 : static_cast<long long>(v);
  }
#endif
  int overflow = 0;
  const long long k = PyLong_AsLongLongAndOverflow(step, &overflow);
  return overflow != 0 || k < 0 ? -1 : k;
}

// A step that is not an exact non-negative int: the method says what is wrong with it.
LAGGARD_COLD PyObject* begin_step_python(StepState* s, PyObject* self, PyObject* step) {
  PyObject* an = PyWeakref_GET_OBJECT(s->an_ref);
  if (an == Py_None) Py_RETURN_NONE;
  Py_INCREF(an);
  PyObject* r = call_python(s->begin_py, an, step);
  s->sampled = s->target != nullptr && s->target->rec().sampled();
  PyObject* section = PyCFunction_NewEx(&kStepSection, self, nullptr);
  if (section != nullptr) set_attr(an, g_k_section, section);  // the method swapped its own in
  Py_XDECREF(section);
  PyErr_Clear();
  Py_DECREF(an);
  return r;
}

// A sampled step's begin or end: the cache lines it will touch, asked for at once (their
// addresses are in this object) rather than one after another as the code reaches them.
LAGGARD_HOT inline void prefetch_sampled(const StepState* s) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(s->an_cpp);
  __builtin_prefetch(s->d, 1);
  if (s->d->resources) {
    __builtin_prefetch(s->gc_cb, 1);
    __builtin_prefetch(s->gc_list, 1);
  }
#endif
  s->rec->prefetch_step();
}

LAGGARD_HOT inline bool target_begin_step(StepState* s, long long k) noexcept {
  if (LAGGARD_LIKELY(s->an_cpp != nullptr)) {
    s->an_cpp->begin_step(k);
    return s->an_cpp->sampled();
  }
  return s->target->begin_step(k);
}

// A step that is not sampled touches this object alone: the step, one flag, the interval.
LAGGARD_HOT PyObject* step_begin_step(PyObject* self, PyObject* step) {
  auto* s = reinterpret_cast<StepState*>(self);
  if (s->target == nullptr) Py_RETURN_NONE;
  const long long k = exact_step(step);
  if (LAGGARD_UNLIKELY(k < 0)) {
    s->step_k = -1;
    Py_XSETREF(s->step, Py_NewRef(step));
    return begin_step_python(s, self, step);
  }
  // The number, not the object: the previous step's int is not freed here (its pool's memory
  // is cold), and `step` reads make a new one.
  s->step_k = k;
  if (LAGGARD_UNLIKELY(s->step != nullptr)) Py_CLEAR(s->step);
  if (!s->sampled && s->skip_every >= 0 && (s->skip_every == 0 || k % s->skip_every != 0))
    Py_RETURN_NONE;  // not sampled, nothing open: the recorder has nothing to do
  prefetch_sampled(s);
  PyObject* an = PyWeakref_GET_OBJECT(s->an_ref);
  if (an == Py_None) Py_RETURN_NONE;
  Py_INCREF(an);
  const bool sampled = target_begin_step(s, k);
  s->sampled = sampled;
  set_sampled(s, an, sampled ? Py_True : Py_False);
  if (sampled) {
    resources_begin(s);
    if (LAGGARD_UNLIKELY(PyList_GET_SIZE(s->on_begin) > 0))
      call_hooks(s, s->on_begin, "begin_step", "attached");
  }
  Py_DECREF(an);
  Py_RETURN_NONE;
}

LAGGARD_HOT PyObject* step_end_step(PyObject* self, PyObject*) {
  auto* s = reinterpret_cast<StepState*>(self);
  if (!s->sampled || s->target == nullptr) Py_RETURN_NONE;
  prefetch_sampled(s);
  PyObject* an = PyWeakref_GET_OBJECT(s->an_ref);
  if (an == Py_None) Py_RETURN_NONE;
  Py_INCREF(an);
  // One clock read for the step's end and the readings' staleness and period (steady_clock
  // is CLOCK_MONOTONIC, time.monotonic()'s clock).
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  Recorder::SlotReadings readings;
  resources_end(s, static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9,
                &readings);
  s->sampled = false;
  set_sampled(s, an, Py_False);
  // Nothing between resources_end and this (no Python code, the GIL held): the readings'
  // arrays are as resources_end left them.
  const std::chrono::steady_clock::time_point now(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
  if (LAGGARD_LIKELY(s->an_cpp != nullptr))
    s->an_cpp->end_step(now, readings);
  else
    s->target->end_step_at(now, readings);
  if (LAGGARD_UNLIKELY(s->find_cuda != nullptr)) find_cuda(s);
  if (LAGGARD_UNLIKELY(PyList_GET_SIZE(s->on_end) > 0))
    call_hooks(s, s->on_end, "end_step", "detached");
  Py_DECREF(an);
  Py_RETURN_NONE;
}

// The Analyzer's section(name, kind=None) while the builtins are in place: not sampled, the
// no-op section; sampled, the name's SectionScope; anything else, the Python section().
LAGGARD_HOT PyObject* step_section(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                                   PyObject* kwnames) {
  auto* s = reinterpret_cast<StepState*>(self);
  if (section_args_ok(nargs, kwnames)) {
    if (!s->sampled) return Py_NewRef(s->noop);
    PyObject* hit = PyDict_GetItemWithError(s->sections, args[0]);
    if (hit != nullptr) return Py_NewRef(hit);
    PyErr_Clear();  // an unhashable name: the Python section() counts it
  }
  return PyObject_Vectorcall(s->section_py, args, nargs, kwnames);
}

// add_data_wait(ms, in_sampled_step): ResourceSampler.add_data_wait's figures, kept here.
PyObject* step_add_data_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "add_data_wait(ms, in_sampled_step) takes 2 arguments");
    return nullptr;
  }
  const double ms = PyFloat_AsDouble(args[0]);
  if (ms == -1.0 && PyErr_Occurred()) return nullptr;
  const int in_step = PyObject_IsTrue(args[1]);
  if (in_step < 0) return nullptr;
  StepData& d = *reinterpret_cast<StepState*>(self)->d;
  if (in_step) {
    d.wait_in_step_ms = (d.has_wait_in_step ? d.wait_in_step_ms : 0.0) + ms;
    d.has_wait_in_step = true;
  } else {
    d.wait_before_ms = ms;
    d.has_wait_before = true;
  }
  Py_RETURN_NONE;
}

// publish(t, pairs): the sampler thread's readings (a tuple of (str, number)), taken whole.
PyObject* step_publish(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "publish(t, pairs) takes 2 arguments");
    return nullptr;
  }
  const double t = PyFloat_AsDouble(args[0]);
  if (t == -1.0 && PyErr_Occurred()) return nullptr;
  StepData& d = *reinterpret_cast<StepState*>(self)->d;
  std::size_t kept = 0;
  const bool ok = each_pair(args[1], "publish: expected a tuple of (name, value)", "publish",
                            [&](std::string_view v, double value) {
                              if (d.names.size() <= kept) {
                                d.names.emplace_back();
                                d.values.push_back(0.0);
                                d.slots.push_back(StepData::kUnknownSlot);
                              }
                              if (d.names[kept] != v) {
                                d.names[kept].assign(v);
                                d.slots[kept] = StepData::kUnknownSlot;
                              }
                              if (d.slots[kept] == StepData::kUnknownSlot) d.unresolved = true;
                              d.values[kept++] = value;
                            });
  if (!ok) return nullptr;
  d.names.resize(kept);
  d.values.resize(kept);
  d.slots.resize(kept);
  d.latest_t = t;
  d.has_latest = true;
  Py_RETURN_NONE;
}

// set_resources(gc_callbacks, period_s, fixed, min, max, find_cuda): the resource half of the
// sampled step, from laggard.resources.ResourceSampler.attach_steps; gc_callbacks None: no GC
// pauses. Returns the GC callback builtin (None without).
PyObject* step_set_resources(PyObject* self, PyObject* args) {
  auto* s = reinterpret_cast<StepState*>(self);
  PyObject *gc_list, *find_cuda;
  double period, fixed, lo, hi;
  if (!PyArg_ParseTuple(args, "OddddO", &gc_list, &period, &fixed, &lo, &hi, &find_cuda))
    return nullptr;
  if (gc_list != Py_None && !PyList_Check(gc_list)) {
    PyErr_SetString(PyExc_TypeError, "set_resources: gc_callbacks must be gc.callbacks");
    return nullptr;
  }
  StepData& d = *s->d;
  gc_detach(s);
  Py_CLEAR(s->gc_list);
  Py_CLEAR(s->find_cuda);
  if (gc_list != Py_None) {
    if (s->gc_cb == nullptr)
      s->gc_cb = g_gc_pauses_type->tp_alloc(g_gc_pauses_type, 0);
    if (s->gc_cb == nullptr) return nullptr;
    s->gc_list = Py_NewRef(gc_list);
  }
  if (find_cuda != Py_None) s->find_cuda = Py_NewRef(find_cuda);
  d.period_s = period;
  d.fixed_period = fixed > 0.0;
  d.min_period_s = lo;
  d.max_period_s = hi;
  d.resources = true;
  return Py_NewRef(gc_list != Py_None ? s->gc_cb : Py_None);
}

PyObject* step_resources_begin(PyObject* self, PyObject*) {
  resources_begin(reinterpret_cast<StepState*>(self));
  Py_RETURN_NONE;
}

PyObject* step_resources_end(PyObject* self, PyObject*) {
  resources_end(reinterpret_cast<StepState*>(self), monotonic_s(), nullptr);
  Py_RETURN_NONE;
}

// release_resources(): the GC callback out, no more resources (the sampler's close).
PyObject* step_release_resources(PyObject* self, PyObject*) {
  auto* s = reinterpret_cast<StepState*>(self);
  gc_detach(s);
  s->d->resources = false;
  Py_CLEAR(s->find_cuda);
  Py_RETURN_NONE;
}

// release(): that, and the recorder never touched again (the Analyzer's close, a forked child):
// the builtins, wherever they are kept, do nothing from now on.
PyObject* step_release(PyObject* self, PyObject*) {
  auto* s = reinterpret_cast<StepState*>(self);
  step_release_resources(self, nullptr);
  Py_DECREF(Py_None);
  s->target = nullptr;
  s->sampled = false;
  Py_RETURN_NONE;
}

PyObject* step_get_period(PyObject* self, void*) {
  return PyFloat_FromDouble(reinterpret_cast<StepState*>(self)->d->period_s);
}

int step_set_period(PyObject* self, PyObject* value, void*) {
  const double v = value ? PyFloat_AsDouble(value) : -1.0;
  if (v == -1.0 && PyErr_Occurred()) return -1;
  if (!(v > 0.0)) {
    PyErr_SetString(PyExc_ValueError, "period_s must be > 0");
    return -1;
  }
  reinterpret_cast<StepState*>(self)->d->period_s = v;
  return 0;
}

PyObject* step_get_gc_attached(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<StepState*>(self)->d->gc_attached);
}

PyObject* step_get_step(PyObject* self, void*) {
  auto* s = reinterpret_cast<StepState*>(self);
  if (s->step_k >= 0) return PyLong_FromLongLong(s->step_k);
  return Py_NewRef(s->step ? s->step : Py_None);
}

int step_set_step(PyObject* self, PyObject* value, void*) {
  auto* s = reinterpret_cast<StepState*>(self);
  if (value == nullptr) value = Py_None;
  const long long k = exact_step(value);
  s->step_k = k;
  Py_XSETREF(s->step, k >= 0 ? nullptr : Py_NewRef(value));
  return 0;
}

PyObject* step_get_sampled(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<StepState*>(self)->sampled);
}

// New builtins each time: they hold this object, which holds none of them (no reference cycle:
// the engine goes with the Analyzer, not at the next garbage collection).
PyObject* step_get_calls(PyObject* self, void*) {
  PyObject* begin = PyCFunction_NewEx(&kStepBegin, self, nullptr);
  PyObject* end = PyCFunction_NewEx(&kStepEnd, self, nullptr);
  PyObject* section = PyCFunction_NewEx(&kStepSection, self, nullptr);
  PyObject* out = begin && end && section ? PyTuple_Pack(3, begin, end, section) : nullptr;
  Py_XDECREF(begin);
  Py_XDECREF(end);
  Py_XDECREF(section);
  return out;
}

// The references a StepState owns: what tp_traverse visits and tp_clear drops, one list so that
// a new one cannot be added to one and forgotten in the other.
std::array<PyObject**, 16> owned_refs(StepState* s) {
  return {&s->owner, &s->an_ref, &s->begin_py, &s->end_py, &s->report, &s->section_on,
          &s->section_off, &s->noop, &s->sections, &s->section_py, &s->on_begin, &s->on_end,
          &s->gc_list, &s->gc_cb, &s->find_cuda, &s->step};
}

int step_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  for (PyObject** ref : owned_refs(reinterpret_cast<StepState*>(self))) Py_VISIT(*ref);
  return 0;
}

int step_clear(PyObject* self) {
  auto* s = reinterpret_cast<StepState*>(self);
  s->target = nullptr;  // with the owner gone, nothing may reach the recorder
  for (PyObject** ref : owned_refs(s)) Py_CLEAR(*ref);
  return 0;
}

void step_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  if (reinterpret_cast<StepState*>(self)->d != nullptr) gc_detach(reinterpret_cast<StepState*>(self));
  step_clear(self);
  auto* s = reinterpret_cast<StepState*>(self);
  delete s->d;
  s->d = nullptr;
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyMethodDef kStepMethods[] = {
    {"publish", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(step_publish)),
     METH_FASTCALL, "publish(t, pairs): the resource sampler's latest readings (time.monotonic "
                    "t), copied into each sampled step until stale."},
    {"add_data_wait",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(step_add_data_wait)),
     METH_FASTCALL, "add_data_wait(ms, in_sampled_step): a batch fetch (host_data_wait_ms)."},
    {"set_resources", step_set_resources, METH_VARARGS,
     "set_resources(gc_callbacks, period_s, fixed_period_s, min_period_s, max_period_s, "
     "find_cuda): the sampled step's resource figures; returns the GC callback (None when "
     "gc_callbacks is None)."},
    {"resources_begin", step_resources_begin, METH_NOARGS,
     "A sampled step's begin: the GC callback goes in."},
    {"resources_end", step_resources_end, METH_NOARGS,
     "A sampled step's end, before the recorder's: its resources into the sample."},
    {"release_resources", step_release_resources, METH_NOARGS,
     "The GC callback out, no more resources (the resource sampler's close)."},
    {"release", step_release, METH_NOARGS,
     "release_resources(), and the builtins never touch the recorder again (close, a forked "
     "child)."},
    {nullptr, nullptr, 0, nullptr}};
PyGetSetDef kStepGetSet[] = {
    {"period_s", step_get_period, step_set_period,
     "How often the resource sampler reads (it follows the time between sampled steps).",
     nullptr},
    {"gc_attached", step_get_gc_attached, nullptr,
     "Whether the GC callback is in gc.callbacks.", nullptr},
    {"calls", step_get_calls, nullptr, "The builtins (begin_step, end_step, section).",
     nullptr},
    {"step", step_get_step, step_set_step, "The step begun last.", nullptr},
    {"sampled", step_get_sampled, nullptr, "Whether the builtins' step is sampled.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};
PyType_Slot kStepSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(step_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(step_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(step_clear)},
    {Py_tp_methods, kStepMethods},
    {Py_tp_getset, kStepGetSet},
    {Py_tp_doc, const_cast<char*>("The Analyzer's step in one call each way (step_state()).")},
    {0, nullptr}};
PyType_Spec kStepSpec = {"laggard._core.StepState", sizeof(StepState), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, kStepSlots};
PyTypeObject* g_step_type = nullptr;

py::object make_step_state(py::handle step_builtin, py::handle analyzer, py::handle begin_py,
                           py::handle end_py, py::handle report, py::handle section_on,
                           py::handle section_off, py::handle on_begin, py::handle on_end,
                           long long skip_every) {
  // The recorder comes from a step_calls() builtin: its self is the handle of owner and target.
  PyObject* handle = PyCFunction_Check(step_builtin.ptr())
                         ? PyCFunction_GET_SELF(step_builtin.ptr())
                         : nullptr;
  if (handle == nullptr || Py_TYPE(handle) != g_handle_type)
    throw py::type_error("step_state: the first argument must be a step_calls() builtin");
  if (!PyList_Check(on_begin.ptr()) || !PyList_Check(on_end.ptr()))
    throw py::type_error("step_state: on_begin and on_end must be lists");
  // section_calls()' builtins: self is (noop, fallback) and (sections, fallback).
  PyObject* off_self =
      PyCFunction_Check(section_off.ptr()) ? PyCFunction_GET_SELF(section_off.ptr()) : nullptr;
  PyObject* on_self =
      PyCFunction_Check(section_on.ptr()) ? PyCFunction_GET_SELF(section_on.ptr()) : nullptr;
  if (off_self == nullptr || on_self == nullptr || !PyTuple_Check(off_self) ||
      !PyTuple_Check(on_self) || PyTuple_GET_SIZE(off_self) != 2 ||
      PyTuple_GET_SIZE(on_self) != 2 || !PyDict_Check(PyTuple_GET_ITEM(on_self, 0)))
    throw py::type_error("step_state: section_on and section_off must be section_calls()'");
  PyObject* ref = PyWeakref_NewRef(analyzer.ptr(), nullptr);
  if (!ref) throw py::error_already_set();
  PyObject* obj = g_step_type->tp_alloc(g_step_type, 0);
  if (!obj) {
    Py_DECREF(ref);
    throw py::error_already_set();
  }
  auto* s = reinterpret_cast<StepState*>(obj);
  auto* h = reinterpret_cast<HotHandle*>(handle);
  s->d = new StepData();
  s->owner = Py_NewRef(h->owner);
  s->target = h->target;
  s->an_cpp = h->target->analyzer();
  s->rec = &h->target->rec();
  s->an_ref = ref;
  s->begin_py = Py_NewRef(begin_py.ptr());
  s->end_py = Py_NewRef(end_py.ptr());
  s->report = Py_NewRef(report.ptr());
  s->section_on = Py_NewRef(section_on.ptr());
  s->section_off = Py_NewRef(section_off.ptr());
  s->noop = Py_NewRef(PyTuple_GET_ITEM(off_self, 0));
  s->sections = Py_NewRef(PyTuple_GET_ITEM(on_self, 0));
  s->section_py = Py_NewRef(PyTuple_GET_ITEM(on_self, 1));
  s->on_begin = Py_NewRef(on_begin.ptr());
  s->on_end = Py_NewRef(on_end.ptr());
  s->skip_every = skip_every;
  s->step_k = -1;  // no step yet: `step` is None
  PyTypeObject* cls = Py_TYPE(analyzer.ptr());
  s->dict_sampled = cls->tp_setattro == PyObject_GenericSetAttr &&
                    _PyType_Lookup(cls, g_k_sampled) == nullptr;
  auto state = py::reinterpret_steal<py::object>(obj);
  return state;
}

}  // namespace

void init_hot_types(py::module_& m) {
  g_handle_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kHandleSpec));
  g_scope_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kScopeSpec));
  if (g_scope_type == nullptr) throw py::error_already_set();
  {
    auto* call_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kScopeCallSpec));
    if (call_type == nullptr) throw py::error_already_set();
    for (const bool exit : {false, true}) {
      PyObject* d = call_type->tp_alloc(call_type, 0);
      if (d == nullptr) throw py::error_already_set();
      reinterpret_cast<ScopeCall*>(d)->exit = exit;
      const int rc = PyObject_SetAttrString(reinterpret_cast<PyObject*>(g_scope_type),
                                            exit ? "__exit__" : "__enter__", d);
      Py_DECREF(d);
      if (rc < 0) throw py::error_already_set();
    }
    Py_DECREF(call_type);  // the descriptors hold it
  }
  g_step_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kStepSpec));
  g_gc_pauses_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kGcPausesSpec));
  g_k_step = PyUnicode_InternFromString("step");
  g_k_sampled = PyUnicode_InternFromString("_sampled");
  g_k_section = PyUnicode_InternFromString("section");
  if (!g_handle_type || !g_scope_type || !g_step_type || !g_gc_pauses_type || !g_k_step || !g_k_sampled ||
      !g_k_section)
    throw py::error_already_set();
  m.attr("StepState") =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_step_type));
  m.def("step_state", &make_step_state, py::arg("step_builtin"), py::arg("analyzer"),
        py::arg("begin_py"), py::arg("end_py"), py::arg("report"), py::arg("section_on"),
        py::arg("section_off"), py::arg("on_begin"), py::arg("on_end"), py::arg("skip_every"),
        "The Analyzer's step in one call each way: a StepState whose `calls` are builtins "
        "begin_step(step), end_step() and section(name, kind=None) for the Analyzer's instance dict (host clock). "
        "step_builtin: a begin_step builtin of step_calls() (the recorder); begin_py/end_py: "
        "the Python methods, called with the Analyzer for a step that is not an exact "
        "non-negative int; report(kind, exc) counts a failure; section_on/section_off: the "
        "section() builtins of section_calls() (their no-op, dict and fallback serve `calls`"
        "' section; the method swaps them in); on_begin/on_end: lists of calls "
        "made at a sampled step's begin and end; skip_every: the interval when a step that is "
        "not sampled needs no recorder call, else -1.");
  m.attr("RecorderHandle") =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_handle_type));
  m.attr("SectionScope") =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_scope_type));
  m.def(
      "section_calls",
      [](py::object noop, py::dict sections, py::object fallback) {
        py::tuple unsampled = py::make_tuple(noop, fallback);
        py::tuple sampled = py::make_tuple(sections, fallback);
        PyObject* a = PyCFunction_NewEx(&kNoopSection, unsampled.ptr(), nullptr);
        if (!a) throw py::error_already_set();
        py::object first = py::reinterpret_steal<py::object>(a);
        PyObject* b = PyCFunction_NewEx(&kSampledSection, sampled.ptr(), nullptr);
        if (!b) throw py::error_already_set();
        return py::make_tuple(first, py::reinterpret_steal<py::object>(b));
      },
      py::arg("noop"), py::arg("sections"), py::arg("fallback"),
      "The Analyzer's two section() builtins: (not sampled: returns `noop`; sampled: returns "
      "sections[name]); other calls go to fallback(name, kind=None).");
}

py::object section_scope(const py::object& owner, HotTarget& target, int id) {
  py::object scope = new_handle(g_scope_type, owner, target, id);
  reinterpret_cast<HotScope*>(scope.ptr())->call = scope_call;
  return scope;
}

py::tuple stage_marks(const py::object& owner, HotTarget& target, int id) {
  py::object h = new_handle(g_handle_type, owner, target, id);
  return py::make_tuple(new_builtin(&kHotBegin, h), new_builtin(&kHotEnd, h));
}

py::object cancel_mark(const py::object& owner, HotTarget& target, int id) {
  return new_builtin(&kHotCancel, new_handle(g_handle_type, owner, target, id));
}

py::tuple step_calls(const py::object& owner, HotTarget& target) {
  py::object h = new_handle(g_handle_type, owner, target, -1);
  return py::make_tuple(new_builtin(&kHotBeginStep, h), new_builtin(&kHotEndStep, h),
                        new_builtin(&kHotSetStream, h));
}

py::object record_resources_call(const py::object& owner, HotTarget& target) {
  return new_builtin(&kHotRecordResources, new_handle(g_handle_type, owner, target, -1));
}

py::tuple deferred_calls(const py::object& owner, HotTarget& target) {
  py::object h = new_handle(g_handle_type, owner, target, -1);
  return py::make_tuple(new_builtin(&kHotDefer, h), new_builtin(&kHotResolve, h));
}

}  // namespace laggard::py_bindings
