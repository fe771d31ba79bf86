// laggard._core.Engine: the live engine (laggard::Analyzer, the same as C++ programs use) for
// the Python Analyzer, and what Python plugs into it: sinks (callables), transports written in
// Python (laggard.transport.GlooTransport over torch.distributed), and the log.
//
// The engine's threads take the GIL only for those calls, one call at a time; the CPU time they
// hold it for is counted (counters()["background_gil_ms"]), since the training thread may wait
// for it. A Python transport is called at most every `transport_poll_s` to look for messages,
// and the engine batches samples for `batch_period_s`, so that the GIL is taken a few times a
// second, not at every turn of the background thread.
#include <time.h>

#include <functional>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"

namespace laggard::py_bindings {

using namespace pybind11::literals;

namespace {

// Cleared when the interpreter exits (atexit): laggard's threads stop calling Python then.
std::atomic<bool> g_python_alive{true};

std::uint64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// CPU time laggard's threads held the GIL for, per engine.
struct GilTime {
  std::atomic<std::uint64_t> ns{0};
};

/// Holds the GIL for one call from one of laggard's threads and counts the CPU time it held it.
/// The thread state pybind11 makes for a C++ thread's first call is kept for the thread's later
/// calls: otherwise each call (the transport's poll, ten times a second) creates and deletes
/// one, which cost more CPU than the call itself (bench/background_cpu.py). The interpreter
/// deletes kept states at exit.
class WithGil {
 public:
  explicit WithGil(GilTime* t) : time_(t), start_(thread_cpu_ns()) {
    if (new_state_) gil_.inc_ref();
  }
  ~WithGil() {
    if (time_) time_->ns.fetch_add(thread_cpu_ns() - start_, std::memory_order_relaxed);
  }
  WithGil(const WithGil&) = delete;
  WithGil& operator=(const WithGil&) = delete;

 private:
  // Declared before gil_: whether this thread had no thread state before gil_ made one.
  bool new_state_ = PyGILState_GetThisThreadState() == nullptr;
  py::gil_scoped_acquire gil_;
  GilTime* time_;
  std::uint64_t start_;
};

/// "ValueError: tracker down" for the Python exception being handled.
std::string describe(py::error_already_set& e) {
  std::string type = "Exception";
  try {
    type = py::str(e.type().attr("__name__"));
  } catch (...) {
  }
  std::string text;
  try {
    text = py::str(e.value());
  } catch (...) {
  }
  e.restore();
  PyErr_Clear();
  return type + ": " + text;
}

/// Drops a Python reference from any thread: with the GIL while Python runs, leaked after.
void release(py::object& o) {
  if (!o) return;
  if (g_python_alive.load() && Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    o = py::object();
  } else {
    o.release();  // the interpreter is gone: nothing may touch its objects
  }
}

// A Python callable as a sink: sink(step, metrics_dict); its close() at the end, if it has one.
class PySink final : public Sink {
 public:
  PySink(py::object fn, std::string name, std::shared_ptr<GilTime> gil)
      : fn_(std::move(fn)), name_(std::move(name)), gil_(std::move(gil)) {}
  ~PySink() override { release(fn_); }

  std::string name() const override { return name_; }

  void write(std::int64_t step, const Metrics& metrics, const Report&) override {
    if (!g_python_alive.load()) return;
    std::string failure;
    {
      WithGil gil(gil_.get());
      try {
        fn_(step, metrics_dict(metrics));
      } catch (py::error_already_set& e) {
        failure = describe(e);
      }
    }
    if (!failure.empty()) throw std::runtime_error(failure + "; training continues");
  }

  void close() override {
    if (!g_python_alive.load()) return;
    std::string failure;
    {
      WithGil gil(gil_.get());
      try {
        py::object close = py::getattr(fn_, "close", py::none());
        if (PyCallable_Check(close.ptr())) close();
      } catch (py::error_already_set& e) {
        failure = describe(e);
      }
    }
    if (!failure.empty()) throw std::runtime_error(failure);
  }

 private:
  py::object fn_;
  std::string name_;
  std::shared_ptr<GilTime> gil_;
};

// A transport written in Python (laggard/transport.py has the protocol). One whose attach()
// takes a `wake` says when a message arrived or a link broke, and is looked at only then; any
// other is looked at for messages at most every `poll` unless it was just sent to. What it
// raises becomes a counted warning.
class PyTransport final : public Transport {
 public:
  PyTransport(py::object obj, double poll_s, std::shared_ptr<GilTime> gil)
      : obj_(std::move(obj)),
        poll_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(poll_s))),
        gil_(std::move(gil)) {
    name_ = py::str(py::getattr(obj_, "name", py::str("python")));
    rank_ = obj_.attr("rank").cast<int>();
    world_size_ = obj_.attr("world_size").cast<int>();
    py::tuple links = obj_.attr("links")();
    links_.parent = links[0].cast<int>();
    links_.children = links[1].cast<std::vector<int>>();
  }
  ~PyTransport() override {
    wake_->set(nullptr);  // the transport's threads may outlive the engine
    release(obj_);
  }

  /// Hands the transport the engine's warn(kind, message) and link_broken(peer, reason), and
  /// a wake() when its attach takes one (attach).
  void attach(std::function<void(std::string_view, std::string_view)> warn) {
    py::object attach = py::getattr(obj_, "attach", py::none());
    if (attach.is_none()) return;
    auto broken = broken_;
    py::object warn_fn = py::cpp_function([warn](const std::string& kind, const std::string& message) {
      if (warn) warn(kind, message);
    });
    py::object broken_fn = py::cpp_function([broken](int peer, const std::string& why) {
      std::lock_guard<std::mutex> lock(broken->mu);
      broken->links.emplace_back(peer, why);
    });
    bool takes_wake = false;
    try {
      py::object params =
          py::module_::import("inspect").attr("signature")(attach).attr("parameters");
      takes_wake = params.contains("wake");
    } catch (py::error_already_set&) {
    }
    if (!takes_wake) {
      attach(warn_fn, broken_fn);
      return;
    }
    auto wake = wake_;
    // Called by the transport's threads with the GIL: a flag and a futex wake, no lock held.
    attach(warn_fn, broken_fn, py::cpp_function([wake] { wake->fire(); }));
    wakes_ = true;
  }

  bool set_wake(std::function<void()> wake) override {
    if (!wakes_) return false;
    wake_->set(std::move(wake));
    return true;
  }

  void closing() override {
    if (!g_python_alive.load()) return;
    {
      WithGil gil(gil_.get());
      try {
        py::object closing = py::getattr(obj_, "closing", py::none());
        if (!closing.is_none()) closing();
      } catch (py::error_already_set& e) {
        describe(e);  // closing anyway
      }
    }
    closing_ = true;
    wake_->arrived.store(true, std::memory_order_relaxed);  // look again: healthy() may change
  }

  void broken_links(std::vector<std::pair<int, std::string>>& out) override {
    std::lock_guard<std::mutex> lock(broken_->mu);
    if (!broken_->links.empty()) {  // read what came before
      last_poll_ = Clock::time_point{};
      wake_->arrived.store(true, std::memory_order_relaxed);
    }
    for (auto& l : broken_->links) out.push_back(std::move(l));
    broken_->links.clear();
  }

  const char* name() const noexcept override { return name_.c_str(); }
  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return world_size_; }
  TreeLinks links() const override { return links_; }

  bool send(int peer, std::string& message) override {
    if (!g_python_alive.load()) return false;
    bool ok = false;
    std::string failure;
    {
      WithGil gil(gil_.get());
      try {
        ok = obj_.attr("send")(peer, py::bytes(message)).cast<bool>();
      } catch (py::error_already_set& e) {
        failure = describe(e);
      }
    }
    if (!failure.empty()) throw std::runtime_error("side channel send: " + failure);
    last_poll_ = Clock::time_point{};  // look for the answer at the next turn (not waking)
    return ok;
  }

  void receive(std::vector<TransportMessage>& out) override {
    const auto now = Clock::now();
    if (!g_python_alive.load()) return;
    // A transport that wakes the engine: only when it said something arrived. Any other, and
    // every transport once the engine closes (closing(): it may give up on links by a time
    // of its own): at most every `poll` unless something arrived or was sent.
    const bool arrived = wake_->arrived.exchange(false, std::memory_order_relaxed);
    if (!arrived && (wakes_ && !closing_ ? true : now - last_poll_ < poll_)) return;
    last_poll_ = now;
    std::string failure;
    {
      WithGil gil(gil_.get());
      try {
        py::list got = obj_.attr("receive")();
        for (py::handle item : got) {
          auto pair = item.cast<py::tuple>();
          TransportMessage m;
          m.peer = pair[0].cast<int>();
          m.bytes = pair[1].cast<std::string>();
          out.push_back(std::move(m));
        }
        healthy_ = obj_.attr("healthy")().cast<bool>();
      } catch (py::error_already_set& e) {
        failure = describe(e);
      }
    }
    if (!failure.empty()) throw std::runtime_error("side channel receive: " + failure);
  }

  bool healthy() const override { return healthy_ && !failed_; }

  void fail() override {
    failed_ = true;
    call("fail");
  }

  void shutdown() override { call("shutdown"); }

 private:
  using Clock = std::chrono::steady_clock;

  void call(const char* method) {
    if (!g_python_alive.load()) return;
    WithGil gil(gil_.get());
    try {
      obj_.attr(method)();
    } catch (py::error_already_set& e) {
      describe(e);  // at shutdown, nothing more to do about it
    }
  }

  py::object obj_;
  Clock::duration poll_;
  std::shared_ptr<GilTime> gil_;
  std::string name_;
  int rank_ = 0;
  int world_size_ = 1;
  TreeLinks links_;
  Clock::time_point last_poll_{};
  // The engine's wake, shared with the Python callable given to attach (which the transport's
  // threads may call after the engine is gone: then it does nothing).
  struct Wake {
    std::mutex mu;
    std::function<void()> fn;
    std::atomic<bool> arrived{false};
    void set(std::function<void()> f) {
      std::lock_guard<std::mutex> lock(mu);
      fn = std::move(f);
    }
    void fire() {
      arrived.store(true, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mu);
      if (fn) fn();
    }
  };
  std::shared_ptr<Wake> wake_ = std::make_shared<Wake>();
  bool wakes_ = false;
  bool closing_ = false;
  struct Broken {
    std::mutex mu;
    std::vector<std::pair<int, std::string>> links;
  };
  std::shared_ptr<Broken> broken_ = std::make_shared<Broken>();  // filled by the link threads
  bool healthy_ = true;
  bool failed_ = false;
};

// laggard's log messages go to Python's logger "laggard" (the default handler's stderr once the
// interpreter exits).
void install_log_bridge() {
  set_log_handler([](LogLevel level, std::string_view message) {
    if (!g_python_alive.load() || !Py_IsInitialized()) {
      if (level >= LogLevel::warning)
        std::fprintf(stderr, "laggard: %s: %.*s\n", to_string(level),
                     static_cast<int>(message.size()), message.data());
      return;
    }
    py::gil_scoped_acquire gil;
    try {
      static const int kLevels[] = {10, 20, 30, 40};  // logging.DEBUG ... logging.ERROR
      py::module_::import("logging")
          .attr("getLogger")("laggard")
          .attr("log")(kLevels[static_cast<int>(level)], "laggard: %s",
                       py::str(message.data(), message.size()));
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("laggard log handler");
    }
  });
}

/// timing="manual", for tests of the device path on machines without a GPU: a device backend
/// whose marks all complete (each interval 1 ms) once debug_complete_marks(True) says so, and
/// answer "not yet" before, as a GPU that has not got there.
class ManualBackend final : public TimingBackend {
 public:
  explicit ManualBackend(std::shared_ptr<std::atomic<bool>> complete)
      : complete_(std::move(complete)) {}
  const char* name() const noexcept override { return "manual"; }
  std::uint32_t capacity() const noexcept override { return 4096; }
  bool record(std::uint32_t) noexcept override { return true; }
  int elapsed_ms(std::uint32_t, std::uint32_t, double& ms) noexcept override {
    if (!complete_->load(std::memory_order_relaxed)) return 0;
    ms = 1.0;
    return 1;
  }

 private:
  std::shared_ptr<std::atomic<bool>> complete_;
};

class PyEngine final : public HotTarget {
 public:
  explicit PyEngine(const py::kwargs& kw) : gil_(std::make_shared<GilTime>()) {
    const auto get = [&kw](const char* key) -> py::object {
      return kw.contains(key) ? py::reinterpret_borrow<py::object>(kw[key]) : py::none();
    };
    AnalyzerOptions o;
    o.enabled = true;
    const auto set_int = [&](const char* key, int& field) {
      if (auto v = get(key); !v.is_none()) field = v.cast<int>();
    };
    const auto set_double = [&](const char* key, double& field) {
      if (auto v = get(key); !v.is_none()) field = v.cast<double>();
    };
    set_int("interval", o.interval);
    set_int("rank", o.rank.rank);
    set_int("world_size", o.rank.world_size);
    set_int("local_rank", o.rank.local_rank);
    if (auto v = get("host"); !v.is_none()) o.rank.host = v.cast<std::string>();
    if (auto v = get("cohort"); !v.is_none()) o.rank.cohort = v.cast<std::string>();
    if (auto v = get("detector"); !v.is_none()) o.set_detector(v.cast<DetectorOptions>());
    if (auto v = get("log_dir"); !v.is_none()) o.log_dir = v.cast<std::string>();
    set_int("analysis_rank", o.analysis_rank);
    if (auto v = get("queue_capacity"); !v.is_none()) o.queue_capacity = v.cast<std::size_t>();
    set_double("close_timeout_s", o.close_timeout_s);
    set_double("side_channel_timeout_s", o.side_channel_timeout_s);
    set_double("window_timeout_s", o.window_timeout_s);
    set_double("batch_period_s", o.batch_period_s);
    set_double("poll_interval_s", o.poll_interval_s);
    set_double("warning_interval_s", o.warning_interval_s);
    set_int("fan_out", o.fan_out);
    set_int("ranks_per_host", o.ranks_per_host);
    set_int("max_pending_steps", o.max_pending_steps);
    set_int("cuda_device", o.cuda_device);
    if (auto v = get("flush_on_signal"); !v.is_none()) o.flush_on_signal = v.cast<bool>();
    if (auto v = get("stop_after_windows"); !v.is_none()) o.stop_after_windows = v.cast<int>();
    if (auto v = get("stop_lead_s"); !v.is_none()) o.stop_lead_s = v.cast<double>();
    if (auto v = get("timing"); !v.is_none()) {
      const auto t = v.cast<std::string>();
      if (t == "cuda") {
        o.timing = Timing::cuda;
      } else if (t == "manual") {  // tests only (ManualBackend)
        auto complete = manual_complete_;
        o.timing_backend = [complete] { return std::make_unique<ManualBackend>(complete); };
      } else if (t != "host") {
        throw std::invalid_argument("Engine: timing must be 'host' or 'cuda', got '" + t + "'");
      }
    }
    if (auto v = get("max_pending_windows"); !v.is_none())
      o.max_pending_windows = v.cast<std::size_t>();
    if (auto v = get("channel"); !v.is_none()) o.channel = v.cast<std::string>();
    double poll_s = 0.1;
    set_double("transport_poll_s", poll_s);
    py::object transport = get("transport");
    if (transport.is_none() || py::isinstance<py::str>(transport)) {
      o.transport = transport.is_none() ? std::string("local") : transport.cast<std::string>();
    } else {
      auto made = std::make_shared<std::unique_ptr<PyTransport>>(
          std::make_unique<PyTransport>(transport, poll_s, gil_));
      PyTransport* raw = made->get();
      o.transport = raw->name();
      o.transport_factory = [made](const TransportSetup& setup) -> std::unique_ptr<Transport> {
        if (!*made) throw std::runtime_error("the Python transport was used already");
        (*made)->attach(setup.warn);
        return std::move(*made);
      };
    }
    analyzer_ = std::make_unique<Analyzer>(std::move(o));
    if (!analyzer_->enabled()) throw std::runtime_error("the laggard engine could not start");
    recorder_ = analyzer_->recorder();
  }

  ~PyEngine() override {
    if (!analyzer_) return;
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;  // its threads may need the GIL to finish
      analyzer_.reset();
    } else {
      analyzer_.reset();
    }
  }

  Recorder& rec() override { return *recorder_; }
  Analyzer* analyzer() noexcept override { return analyzer_.get(); }
  LAGGARD_HOT bool begin_step(std::int64_t step) override {
    analyzer_->begin_step(step);
    return analyzer_->sampled();
  }
  LAGGARD_HOT void end_step() override { analyzer_->end_step(); }
  LAGGARD_HOT void end_step_at(std::chrono::steady_clock::time_point now,
                               const Recorder::SlotReadings& readings) override {
    analyzer_->end_step(now, readings);
  }

  Analyzer& an() { return *analyzer_; }

  void add_sink(py::object fn, std::string name) {
    analyzer_->add_sink(std::make_shared<PySink>(std::move(fn), std::move(name), gil_));
  }

  void close(double timeout_s) {
    py::gil_scoped_release nogil;
    analyzer_->close(timeout_s);
  }

  /// timing="manual" only: whether the device has passed every mark recorded so far.
  void debug_complete_marks(bool complete) { manual_complete_->store(complete); }

  /// In a child forked from this process: the engine's threads do not exist here and its locks
  /// may be held, so it is never touched again, not even to be destroyed.
  void forget() { (void)analyzer_.release(); }

  py::dict counters() const {
    const AnalyzerCounters c = analyzer_->counters();
    py::dict d = counters_dict(c.recorder);
    d["queue_dropped"] = c.queue_dropped;
    d["queue_pushed"] = c.queue_pushed;
    d["rank_log_written"] = c.samples_logged;
    d["rank_log_lost"] = c.rank_log_lost;
    d["rank_log_left"] = c.rank_log_left;
    d["gather_sent"] = c.samples_sent;
    d["gather_dropped"] = c.gather_dropped;
    d["analysis_dropped"] = c.analysis_dropped;
    d["samples_received"] = c.samples_received;
    d["late_samples"] = c.late_samples;
    d["malformed_samples"] = c.malformed_samples;
    d["windows"] = c.windows;
    d["incomplete_windows"] = c.incomplete_windows;
    d["reports"] = c.reports;
    d["verdicts_sent"] = c.verdicts_sent;
    d["verdicts_received"] = c.verdicts_received;
    d["malformed_verdicts"] = c.malformed_verdicts;
    d["forwarded_samples"] = c.forwarded_samples;
    d["forward_dropped"] = c.forward_dropped;
    d["side_channel_broken"] = c.side_channel_failed || c.parent_down;
    d["background_cpu_ms"] = static_cast<double>(c.background_cpu_ns) / 1e6;
    d["background_gil_ms"] = static_cast<double>(gil_->ns.load()) / 1e6;
    d["report_errors"] = c.errors;
    return d;
  }

 private:
  std::shared_ptr<GilTime> gil_;
  std::shared_ptr<std::atomic<bool>> manual_complete_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<Analyzer> analyzer_;
  Recorder* recorder_ = nullptr;  // the engine's, alive as long as analyzer_ (also after close)
};

/// The verdict as Python reads it on every rank (Analyzer.latest_report()["verdict"]).
py::dict verdict_dict(const StragglerVerdict& v) {
  py::list confirmed;
  for (const VerdictFinding& f : v.confirmed)
    confirmed.append(py::dict("rank"_a = f.rank, "host"_a = f.host, "cohort"_a = f.cohort,
                              "stage"_a = f.stage, "kind"_a = to_string(f.kind), "ms"_a = f.ms,
                              "ref_ms"_a = f.ref_ms, "slowdown"_a = f.slowdown,
                              "cost_ms"_a = f.cost_ms, "cost_share"_a = f.cost_share,
                              "windows_flagged"_a = f.windows_flagged, "reason"_a = f.reason,
                              "onset_step"_a = f.onset_step, "confirmed_step"_a = f.confirmed_step,
                              "windows_held"_a = f.windows_held));
  return py::dict("seq"_a = v.seq, "step"_a = v.step, "ranks_seen"_a = v.ranks_seen,
                  "world_size"_a = v.world_size, "step_ms"_a = v.step_ms,
                  "whatif_step_saving_ms"_a = v.whatif_step_saving_ms,
                  "likely_bottleneck"_a = v.likely_bottleneck, "num_confirmed"_a = v.num_confirmed,
                  "confirmed"_a = confirmed, "rank"_a = v.rank, "score"_a = v.score,
                  "self_confirmed"_a = v.self_confirmed,
                  "stop_step"_a = v.stop_step < 0 ? py::object(py::none())
                                                   : py::object(py::int_(v.stop_step)));
}

}  // namespace

void bind_engine(py::module_& m) {
  install_log_bridge();
  m.def("_python_exiting", [] { g_python_alive.store(false); },
        "Called at interpreter exit: laggard's threads stop calling Python.");
  py::module_::import("atexit").attr("register")(m.attr("_python_exiting"));

  m.def(
      "_keep_forever",
      [](py::object o) {
        // Never released, not even when the interpreter exits (laggard/transport.py says why).
        static auto* kept = new std::vector<py::object>;
        kept->push_back(std::move(o));
      },
      "Keeps `obj` alive until the process ends.", "obj"_a);
  m.def(
      "register_transport_capsule",
      [](const std::string& name, py::capsule factory) {
        // A transport built in another extension module (laggard._mpi): its factory function,
        // registered in this module's registry; everything it creates runs that module's code.
        using Create = std::unique_ptr<Transport> (*)(const TransportSetup&);
        if (std::string(factory.name() ? factory.name() : "") != "laggard.transport_factory")
          throw std::invalid_argument("register_transport_capsule: not a laggard transport "
                                      "factory capsule");
        const auto create = reinterpret_cast<Create>(factory.get_pointer());
        register_transport(name, [create](const TransportSetup& setup) { return create(setup); });
      },
      "Registers a transport factory exported by another module (laggard._mpi.factory) under "
      "`name`.",
      "name"_a, "factory"_a);
  m.def("transport_names", &transport_names, "The registered transports' names, sorted.");
  m.def(
      "gather_tree",
      [](int rank, int world_size, int root, const std::vector<int>& host_of, int fan_out) {
        const TreeLinks l = gather_tree(rank, world_size, root, host_of, fan_out);
        return py::make_tuple(l.parent, l.children);
      },
      "(parent, children) of `rank` in the gather tree (laggard/transport.hpp): host_of[r] "
      "names rank r's host ([]: every rank its own), leaders `fan_out` to a leader; the "
      "parent is -1 on the root.",
      "rank"_a, "world_size"_a, "root"_a, "host_of"_a, "fan_out"_a = 32);

  auto e_class = py::class_<PyEngine>(
      m, "Engine",
      "The live engine (laggard::Analyzer): the recorder, the rank log, the side channel (a "
      "transport by name, or a Python object), window assembly, the detector, the live "
      "metrics, reports.jsonl and the sinks, on two C++ threads. Keyword arguments are "
      "AnalyzerOptions' (docs/reference/python.md); bad ones raise ValueError. The training-thread calls "
      "are builtins (step_calls, marks, section).")
      .def(py::init<const py::kwargs&>())
      .def(
          "stage",
          [](PyEngine& e, const std::string& name, py::object kind) {
            return kind.is_none() ? e.rec().stage(name) : e.rec().stage(name, kind_from(kind));
          },
          "Registers (or finds) a stage; returns its id, -1 when all slots are taken.", "name"_a,
          "kind"_a = py::none())
      .def("add",
           [](PyEngine& e, int id, double ms, std::uint32_t calls) { e.an().add(id, ms, calls); },
           "id"_a, "ms"_a, "calls"_a = 1)
      .def("cancel", [](PyEngine& e, int id) { e.rec().cancel(id); }, "id"_a)
      .def("record", [](PyEngine& e, std::string_view name, double value) {
             e.rec().record(name, value);
           }, "Attaches a value to this sampled step's `values`.", "name"_a, "value"_a)
      .def("record_resource", [](PyEngine& e, std::string_view name, double value) {
             e.rec().record_resource(name, value);
           }, "Attaches a reading to this sampled step's `resources`.", "name"_a, "value"_a)
      // pybind11 forms of the training-thread calls (bench/cold_calls.py compares them with the
      // builtins of step_calls() and marks()).
      .def("begin_step", &PyEngine::begin_step, "step"_a)
      .def("end_step", &PyEngine::end_step)
      .def("begin", [](PyEngine& e, int id) { e.rec().begin(id); }, "id"_a)
      .def("end", [](PyEngine& e, int id) { e.rec().end(id); }, "id"_a)
      .def("poll", [](PyEngine& e) { e.rec().poll(); })
      .def(
          "section",
          [](py::object self, int id) { return section_scope(self, self.cast<PyEngine&>(), id); },
          "A reusable context manager timing stage `id`.", "id"_a)
      .def(
          "marks",
          [](py::object self, int id) { return stage_marks(self, self.cast<PyEngine&>(), id); },
          "(begin, end) builtins of stage `id` that ignore their arguments.", "id"_a)
      .def(
          "cancel_mark",
          [](py::object self, int id) { return cancel_mark(self, self.cast<PyEngine&>(), id); },
          "A builtin dropping stage `id`'s open entry uncounted.", "id"_a)
      .def(
          "step_calls", [](py::object self) { return step_calls(self, self.cast<PyEngine&>()); },
          "(begin_step, end_step, set_stream) builtins.")
      .def(
          "record_resources_call",
          [](py::object self) { return record_resources_call(self, self.cast<PyEngine&>()); },
          "A builtin record_resources(pairs): each (name, value) of a tuple into the sampled "
          "step's resources, in one call (laggard.resources).")
      .def_property_readonly("counters", &PyEngine::counters)
      .def_property_readonly("backend_name",
                             [](PyEngine& e) { return std::string(e.an().backend_name()); })
      .def_property_readonly("transport_name",
                             [](PyEngine& e) { return std::string(e.an().transport_name()); })
      .def_property_readonly("rank", [](PyEngine& e) { return e.an().rank(); })
      .def_property_readonly("world_size", [](PyEngine& e) { return e.an().world_size(); })
      .def_property_readonly("is_analysis_rank",
                             [](PyEngine& e) { return e.an().is_analysis_rank(); })
      .def("add_sink", &PyEngine::add_sink, "sink(step, metrics) on the analysis rank.", "sink"_a,
           "name"_a = "")
      .def("latest_metrics", [](PyEngine& e) { return metrics_dict(e.an().latest_metrics()); })
      .def(
          "latest_report",
          [](PyEngine& e) -> py::object {
            std::optional<Report> r = e.an().latest_report();
            if (!r) return py::none();
            py::dict out = report_dict(*r, e.an().rank());
            out["metrics"] = metrics_dict(e.an().latest_metrics());
            const std::optional<StragglerVerdict> v = e.an().latest_verdict();
            out["verdict"] = v ? py::object(verdict_dict(*v)) : py::none();
            return std::move(out);
          },
          "The latest report as a dict (stages, stragglers, waiting, hints, metrics, verdict), "
          "or None; on every rank (elsewhere than the analysis rank, made from the verdict).")
      .def(
          "latest_verdict",
          [](PyEngine& e) -> py::object {
            const std::optional<StragglerVerdict> v = e.an().latest_verdict();
            if (!v) return py::none();
            return verdict_dict(*v);
          },
          "The latest verdict as a dict, on every rank, or None.")
      .def("verdict_seq", [](PyEngine& e) { return e.an().verdict_seq(); },
           "The latest verdict's seq (0 before the first): cheap, no lock.")
      .def(
          "count_error",
          [](PyEngine& e, const std::string& kind, const std::string& message) {
            e.an().count_error(kind, message);
          },
          "Counts a failure (straggler/report_errors) with a rate-limited warning.", "kind"_a,
          "message"_a)
      .def("debug_fail_transport", [](PyEngine& e) { e.an().debug_fail_transport(); })
      .def("debug_complete_marks", &PyEngine::debug_complete_marks,
           "Tests, timing='manual': whether the fake device has passed every mark so far.",
           "complete"_a)
      .def("close", &PyEngine::close, "Flushes and stops, waiting at most timeout_s (GIL "
           "released).", "timeout_s"_a)
      .def("forget", &PyEngine::forget,
           "In a forked child: never touch the engine again (it is leaked).");
  def_deferred(e_class);
}

}  // namespace laggard::py_bindings
