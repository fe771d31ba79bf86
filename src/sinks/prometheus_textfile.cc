// The Prometheus textfile sink: straggler/* metrics in the text exposition format, written
// atomically for node-exporter's textfile collector.
#include "laggard/prometheus.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

namespace laggard {

namespace {

constexpr std::string_view kStageFields[] = {"local_ms",       "mean_ms",  "max_ms",
                                             "slowdown_ratio", "relative_score", "top_rank",
                                             "num_stragglers"};

std::string metric_name(std::string_view name) {
  std::string out = "laggard_";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '_';
  }
  return out;
}

std::string label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

// One metric family: HELP, TYPE and its samples together, as the format requires.
struct Family {
  std::string help;
  std::vector<std::pair<Labels, double>> samples;
};

}  // namespace

std::string prometheus_text(std::int64_t step, const Metrics& metrics, const RankInfo& self) {
  std::map<std::string, Family> families;
  auto add = [&](const std::string& name, std::string help, Labels labels, double value) {
    Family& f = families[name];
    if (f.help.empty()) f.help = std::move(help);
    f.samples.emplace_back(std::move(labels), value);
  };
  for (const auto& [key, value] : metrics) {
    constexpr std::string_view prefix = "straggler/";
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string_view rest = std::string_view(key).substr(prefix.size());
    if (const std::string* text = std::get_if<std::string>(&value)) {
      if (rest == "likely_bottleneck" && !text->empty())
        add("laggard_likely_bottleneck", "1 for the stage that most likely limits the step",
            {{"stage", *text}}, 1.0);
      if (rest == "confirmed") {
        std::string_view items = *text;
        while (!items.empty()) {
          const std::size_t comma = items.find(',');
          const std::string_view item = items.substr(0, comma);
          items = comma == std::string_view::npos ? std::string_view() : items.substr(comma + 1);
          const std::size_t colon = item.find(':');
          if (colon == std::string_view::npos || colon == 0 || colon + 1 == item.size()) continue;
          add("laggard_confirmed_straggler",
              "1 for each (rank, stage) confirmed in the latest report",
              {{"rank", std::string(item.substr(0, colon))},
               {"stage", std::string(item.substr(colon + 1))}},
              1.0);
        }
      }
      continue;  // other text (hints) has no numeric form
    }
    const double v = std::get<double>(value);
    const std::size_t slash = rest.rfind('/');
    if (slash != std::string_view::npos && slash > 0) {
      const std::string stage(rest.substr(0, slash));
      const std::string_view field = rest.substr(slash + 1);
      bool known = false;
      for (std::string_view f : kStageFields) known = known || f == field;
      if (known) {
        if (field == "local_ms")
          add("laggard_stage_local_ms", "the analysis rank's own time in the stage (ms)",
              {{"stage", stage}, {"rank", std::to_string(self.rank)}, {"host", self.host}}, v);
        else
          add("laggard_stage_" + std::string(field), "straggler/<stage>/" + std::string(field),
              {{"stage", stage}}, v);
        continue;
      }
    }
    add(metric_name(rest), key, {}, v);
  }
  add("laggard_report_step", "the step of the latest report", {}, static_cast<double>(step));

  std::string out;
  for (const auto& [name, family] : families) {
    out += "# HELP " + name + " " + family.help + "\n";
    out += "# TYPE " + name + " gauge\n";
    for (const auto& [labels, value] : family.samples) {
      out += name;
      if (!labels.empty()) {
        out += '{';
        for (std::size_t i = 0; i < labels.size(); ++i) {
          if (i) out += ',';
          out += labels[i].first + "=\"" + label_value(labels[i].second) + "\"";
        }
        out += '}';
      }
      out += ' ' + number(value) + '\n';
    }
  }
  return out;
}

// The process's umask without changing it (umask(2) can only set it, and setting it to read it
// races with the training's other threads creating files): Linux's /proc/self/status, else 022.
mode_t current_umask() {
  static const mode_t mask = [] {
    std::FILE* f = std::fopen("/proc/self/status", "re");
    unsigned value = 022;
    if (f) {
      char line[256];
      while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "Umask: %o", &value) == 1) break;
      std::fclose(f);
    }
    return static_cast<mode_t>(value & 0777);
  }();
  return mask;
}

bool write_file_atomically(const std::string& path, const std::string& text,
                           std::string& error) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // A dot file not named *.prom (node-exporter reads only those), made by mkstemp: a fresh name
  // created exclusively (O_EXCL, so never through a link someone placed; a predictable name in a
  // shared directory would be), not shared by two writers.
  std::string tmp = dir + "." + base + ".tmp-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    error = tmp + ": " + std::strerror(errno);
    return false;
  }
  const auto abandon = [&](const std::string& what, int err) {
    error = what + ": " + std::strerror(err);
    ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return abandon(tmp, n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  // mkstemp's 0600 widened to 0644 less the umask: node-exporter, another user, reads the file.
  if (::fchmod(fd, 0644 & ~current_umask()) != 0) return abandon(tmp, errno);
  if (::close(fd) != 0) {
    error = tmp + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  // rename replaces the directory entry (a link at `path` is replaced, not written through).
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    error = path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

MetricsSink prometheus_textfile_sink(std::string path, RankInfo self) {
  constexpr std::string_view suffix = ".prom";
  if (path.size() <= suffix.size() ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw std::invalid_argument("prometheus_textfile_sink: path must end in .prom "
                                "(node-exporter reads only those), got '" + path + "'");
  return [path = std::move(path), self = std::move(self)](std::int64_t step,
                                                          const Metrics& metrics) {
    std::string error;
    if (!write_file_atomically(path, prometheus_text(step, metrics, self), error))
      throw std::runtime_error("prometheus textfile: " + error);
  };
}

}  // namespace laggard
