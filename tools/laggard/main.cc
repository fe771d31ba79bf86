// laggard — finds the slow rank, the slow stage and the moment a training job got slower.
#include <iostream>

#include "commands.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/version.hpp"
#include "output.hpp"

int main(int argc, char** argv) {
  using namespace laggard::cli;
  CLI::App app{"laggard: finds the slow rank, the slow stage and the moment a distributed "
               "training job got slower."};
  app.set_version_flag("--version", std::string("laggard ") + laggard::kVersion);
  app.require_subcommand(1);

  AnalyzeArgs analyze;
  CompareArgs compare;
  ReportArgs report;
  DemoArgs demo;
  TimelineArgs timeline;
  ScaleArgs scale;
  DivergeArgs diverge;
  DiagnoseArgs diagnose;
  PythonCommandArgs exclude, fleet, watch;
  add_analyze(app, analyze);
  add_compare(app, compare);
  add_report(app, report);
  add_demo(app, demo);
  add_timeline(app, timeline);
  add_scale(app, scale);
  add_diverge(app, diverge);
  add_diagnose(app, diagnose);
  add_exclude(app, exclude);
  add_fleet(app, fleet);
  add_watch(app, watch);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the reason and the usage hint
    return kExitUsage;
  }

  // The newer commands name themselves in their errors ("laggard timeline: ...").
  std::string who = "laggard: ";
  for (const char* name : {"timeline", "scale", "diverge", "diagnose"})
    if (app.got_subcommand(name)) who = std::string("laggard ") + name + ": ";
  try {
    if (app.got_subcommand("timeline")) return run_timeline(timeline);
    if (app.got_subcommand("scale")) return run_scale(scale);
    if (app.got_subcommand("diverge")) return run_diverge(diverge);
    if (app.got_subcommand("diagnose")) return run_diagnose(diagnose);
    if (app.got_subcommand("analyze")) return run_analyze(analyze);
    if (app.got_subcommand("compare")) return run_compare(compare);
    if (app.got_subcommand("report")) return run_report(report);
    if (app.got_subcommand("demo")) return run_demo(demo);
    if (app.got_subcommand("exclude")) return run_exclude(exclude);
    if (app.got_subcommand("fleet")) return run_fleet(fleet);
    if (app.got_subcommand("watch")) return run_watch(watch);
  } catch (const UsageError& e) {
    // printable: a message may name a file of the run directory (a misnamed rank file, say)
    std::cerr << who << printable(e.what) << "\n";
    return kExitUsage;
  } catch (const laggard::InputError& e) {
    std::cerr << who << printable(e.what()) << "\n";
    return kExitUsage;
  } catch (const std::invalid_argument& e) {
    std::cerr << who << printable(e.what()) << "\n";
    return kExitUsage;
  }
  return kExitUsage;
}
