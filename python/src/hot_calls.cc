// The training thread's calls into laggard: CPython builtins and one context-manager type.
#include "bindings.hpp"

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

PyObject* hot_begin(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* h = reinterpret_cast<HotHandle*>(self);
  h->target->rec().begin(h->id);
  Py_RETURN_NONE;
}

PyObject* hot_end(PyObject* self, PyObject* const*, Py_ssize_t) {
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

// record_resources(pairs): each (name, value) of a tuple (or list) into the sampled step's
// `resources`, in one call (laggard.resources hands over ~30 readings per sampled step: as
// pybind11 calls, ~27 µs right after a training step; bench/resources_overhead.py). A pair that
// is not (str, number) raises TypeError; the pairs before it are recorded.
PyObject* hot_record_resources(PyObject* self, PyObject* arg) {
  PyObject* seq = PySequence_Fast(arg, "record_resources: expected a tuple of (name, value)");
  if (!seq) return nullptr;
  Recorder& rec = reinterpret_cast<HotHandle*>(self)->target->rec();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* pair = items[i];
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_TypeError, "record_resources: item %zd is not a (str, number) tuple",
                   i);
      return nullptr;
    }
    Py_ssize_t size = 0;
    const char* name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &size);
    if (!name) {
      Py_DECREF(seq);
      return nullptr;
    }
    const double value = PyFloat_AsDouble(PyTuple_GET_ITEM(pair, 1));
    if (value == -1.0 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return nullptr;
    }
    rec.record_resource(std::string_view(name, static_cast<std::size_t>(size)), value);
  }
  Py_DECREF(seq);
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

PyObject* hot_enter(PyObject* self, PyObject*) { return hot_begin(self, nullptr, 0); }

PyObject* hot_exit(PyObject* self, PyObject* const*, Py_ssize_t) {
  reinterpret_cast<HotHandle*>(self)->target->rec().end(reinterpret_cast<HotHandle*>(self)->id);
  Py_RETURN_FALSE;  // exceptions of the with-body pass through
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

PyObject* noop_section(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                       PyObject* kwnames) {
  if (section_args_ok(nargs, kwnames)) {
    PyObject* noop = PyTuple_GET_ITEM(self, 0);
    Py_INCREF(noop);
    return noop;
  }
  return PyObject_Vectorcall(PyTuple_GET_ITEM(self, 1), args, nargs, kwnames);
}

PyObject* sampled_section(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
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


}  // namespace

void init_hot_types(py::module_& m) {
  g_handle_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kHandleSpec));
  g_scope_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kScopeSpec));
  if (!g_handle_type || !g_scope_type) throw py::error_already_set();
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
  return new_handle(g_scope_type, owner, target, id);
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
