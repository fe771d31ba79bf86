// `laggard exclude ...`, `laggard fleet ...` and `laggard watch ...`: the commands written in Python (the package's
// laggard/exclude.py, fleet.py and watch.py), run through the interpreter and package `demo`
// finds (exec_python_module in demo.cc). Every argument after the command is passed on unparsed
// (`laggard fleet --help` prints the module's own help), and the module's exit status is the
// command's: 0 done, 2 bad input.
#include "commands.hpp"

namespace laggard::cli {

namespace {

void add_python_command(CLI::App& app, PythonCommandArgs& args, const char* name,
                        const char* help) {
  auto* cmd = app.add_subcommand(name, help);
  cmd->set_help_flag();  // --help reaches the module
  cmd->allow_extras();
  cmd->prefix_command();  // everything after the command is the module's, unparsed
  cmd->callback([cmd, &args] { args.args = cmd->remaining(); });
}

}  // namespace

void add_exclude(CLI::App& app, PythonCommandArgs& args) {
  add_python_command(
      app, args, "exclude",
      "Print the hosts to leave out of the next allocation (confirmed stragglers of RUN_DIR, "
      "and with --fleet the fleet store's recurring hosts): Slurm hostlist, hostfile, "
      "Kubernetes node names or JSON. laggard exclude --help");
}

void add_fleet(CLI::App& app, PythonCommandArgs& args) {
  add_python_command(
      app, args, "fleet",
      "The fleet store across jobs: fleet add RUN_DIR..., fleet hosts (hosts ranked against "
      "the fleet's base rate), fleet runs. laggard fleet --help");
}

void add_watch(CLI::App& app, PythonCommandArgs& args) {
  add_python_command(
      app, args, "watch",
      "A live view of a running or finished job from its run directory: confirmed stragglers "
      "with their cost, a ranks x stages heat strip, step time, counters; q quits. "
      "laggard watch --help");
}

int run_exclude(const PythonCommandArgs& args) {
  return exec_python_module("laggard.exclude", args.args, "exclude", "LAGGARD_EXCLUDE_PROG");
}

int run_fleet(const PythonCommandArgs& args) {
  return exec_python_module("laggard.fleet", args.args, "fleet", "LAGGARD_FLEET_PROG");
}

int run_watch(const PythonCommandArgs& args) {
  return exec_python_module("laggard.watch", args.args, "watch", "LAGGARD_WATCH_PROG");
}

}  // namespace laggard::cli
