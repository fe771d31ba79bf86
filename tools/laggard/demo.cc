// `laggard demo [ARGS...]`: runs the Python demo (`python3 -m laggard.demo ARGS...`), which trains
// a small DDP model on local CPU ranks with one rank made slow and prints what laggard finds.
//
// The program replaces itself with the interpreter (execv), so Ctrl-C and other signals reach
// the demo directly and its exit status is the command's. Every argument after `demo` is passed
// on unchanged (`laggard demo --help` prints the demo's own help).
//   interpreter: $LAGGARD_PYTHON (the `laggard` console script of a pip-installed package sets
//                it to its own interpreter), else the one a build tree's module was built for
//                (LAGGARD_PYTHON_EXECUTABLE), else python3 on PATH;
//   package:     $LAGGARD_PYTHONPATH, else the package this program lies in (a wheel's
//                laggard/bin/laggard), else <prefix>/lib/laggard/python next to an installed
//                program, else <source>/python of the build tree (LAGGARD_SOURCE_DIR);
//   the demo's `laggard analyze` step uses this very program ($LAGGARD_CLI, unless already set).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"

#ifndef LAGGARD_SOURCE_DIR
#define LAGGARD_SOURCE_DIR ""
#endif
#ifndef LAGGARD_PYTHON_EXECUTABLE
#define LAGGARD_PYTHON_EXECUTABLE ""
#endif

namespace laggard::cli {

void add_demo(CLI::App& app, DemoArgs& args) {
  auto* cmd = app.add_subcommand(
      "demo",
      "Watch laggard find a straggler: N local CPU ranks train a small DDP model (gloo) with "
      "one rank made slow in one stage; prints live verdicts and the `analyze` summary. "
      "Options go to the demo: laggard demo --help");
  cmd->set_help_flag();  // --help reaches the demo (python -m laggard.demo --help)
  cmd->allow_extras();
  cmd->prefix_command();  // everything after `demo` is the demo's, unparsed
  cmd->callback([cmd, &args] { args.args = cmd->remaining(); });
}

namespace {

bool is_file(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

bool is_executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

/// This program's own path (Linux: /proc/self/exe), or "" when unknown.
std::string self_path() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return {};
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

std::string dirname_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// The directory holding the `laggard` package (the one with laggard/demo.py), or "".
/// Throws UsageError when $LAGGARD_PYTHONPATH is set but does not hold it.
std::string package_dir(const std::string& self) {
  if (const std::string e = env("LAGGARD_PYTHONPATH"); !e.empty()) {
    if (!is_file(e + "/laggard/demo.py"))
      throw UsageError{"demo: LAGGARD_PYTHONPATH=" + e + " holds no laggard/demo.py"};
    return e;
  }
  std::vector<std::string> candidates;
  if (!self.empty()) {
    // <site-packages>/laggard/bin/laggard (pip install)
    candidates.push_back(dirname_of(dirname_of(dirname_of(self))));
    const std::string prefix = dirname_of(dirname_of(self));  // <prefix>/bin/laggard
    candidates.push_back(prefix + "/lib/laggard/python");
    candidates.push_back(prefix + "/lib64/laggard/python");
  }
  if (std::strlen(LAGGARD_SOURCE_DIR) > 0)
    candidates.push_back(std::string(LAGGARD_SOURCE_DIR) + "/python");
  for (const auto& c : candidates)
    if (is_file(c + "/laggard/demo.py")) return c;
  return {};
}

}  // namespace

int run_demo(const DemoArgs& args) {
  return exec_python_module("laggard.demo", args.args, "demo", "LAGGARD_DEMO_PROG");
}

int exec_python_module(const std::string& module, const std::vector<std::string>& args,
                       const std::string& command, const char* prog_env) {
  const std::string self = self_path();
  const std::string pkg = package_dir(self);
  if (pkg.empty())
    throw UsageError{command + ": the Python package `laggard` was not found (looked for "
                     "laggard/demo.py around this program, in <prefix>/lib/laggard/python" +
                     (std::strlen(LAGGARD_SOURCE_DIR) > 0
                          ? " and " + std::string(LAGGARD_SOURCE_DIR) + "/python"
                          : std::string()) +
                     "); set LAGGARD_PYTHONPATH"};

  std::string python = env("LAGGARD_PYTHON");
  if (python.empty() && std::strlen(LAGGARD_PYTHON_EXECUTABLE) > 0 &&
      is_executable(LAGGARD_PYTHON_EXECUTABLE))
    python = LAGGARD_PYTHON_EXECUTABLE;
  if (python.empty()) python = "python3";

  const std::string old_path = env("PYTHONPATH");
  const std::string new_path = old_path.empty() ? pkg : pkg + ":" + old_path;
  setenv("PYTHONPATH", new_path.c_str(), 1);
  if (!self.empty()) setenv("LAGGARD_CLI", self.c_str(), 0);  // analyze with this program
  setenv(prog_env, ("laggard " + command).c_str(), 1);        // the command's usage line
  setenv("OMP_NUM_THREADS", "1", 0);                          // several ranks share the CPUs

  std::vector<std::string> argv_s = {python, "-m", module};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_s.size() + 1);
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::cout.flush();
  std::cerr.flush();
  if (python.find('/') != std::string::npos)
    execv(python.c_str(), argv.data());
  else
    execvp(python.c_str(), argv.data());
  throw UsageError{command + ": cannot run " + python + ": " + std::strerror(errno) +
                   " (set LAGGARD_PYTHON to a Python 3 with the laggard package's needs)"};
}

}  // namespace laggard::cli
