// laggard.torch's hooks for sampled steps, as CPython types: HookSwitch and MethodWrapper.
#include "bindings.hpp"

#include <structmember.h>

namespace laggard::py_bindings {
namespace {

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

void bind_hook_types(py::module_& m) {
  g_switch_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kSwitchSpec));
  auto* wrapper_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kWrapperSpec));
  g_missing = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));
  g_not_in = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));
  if (!g_switch_type || !wrapper_type || !g_missing || !g_not_in) throw py::error_already_set();
  m.attr("HookSwitch") =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_switch_type));
  m.attr("MethodWrapper") =
      py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(wrapper_type));
}

}  // namespace laggard::py_bindings
