#include "output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "commands.hpp"

namespace laggard::cli {

std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return "n/a";
  char buf[64];
  if (std::fabs(value) >= 1e12)
    std::snprintf(buf, sizeof buf, "%.4g", value);
  else
    std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

namespace {

// The length of the valid UTF-8 sequence at the start of `s` (lead byte >= 0x80), or 0.
std::size_t utf8_length(std::string_view s) {
  const auto at = [&s](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = at(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || at(1) < lo || at(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (at(i) < 0x80 || at(i) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  const auto hex = [&out](const char* prefix, unsigned char c) {
    out += prefix;
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F)
        hex("\\x", c);
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    const std::size_t n = utf8_length(text.substr(i));
    if (n == 0) {
      hex("\\x", c);  // not UTF-8: a lone 0x9B is CSI to an 8-bit terminal
      ++i;
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      hex("\\u00", static_cast<unsigned char>(text[i + 1]));  // a C1 control (U+0080-U+009F)
      i += 2;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string join_ints(const std::vector<int>& values, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(values[i]);
  }
  return out;
}

Json number_or_null(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

Json metrics_json(const Metrics& metrics) {
  Json out = Json::object();
  for (const auto& [name, value] : metrics) {
    if (const double* d = std::get_if<double>(&value))
      out[name] = number_or_null(*d);
    else
      out[name] = std::get<std::string>(value);
  }
  return out;
}

void write_file_replacing(const std::string& path, const std::string& text,
                          const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (fs::equivalent(path, input, ec) && !ec)
      throw UsageError{"refusing to write " + path + ": it is an input of this run (" + input +
                       ")"};
  }
  const auto fail = [&path](const std::string& why) {
    return UsageError{"cannot write " + path + ": " + why};
  };
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::is_directory(status)) throw fail("it is a directory");
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    // A device, a FIFO, a terminal (`-o /dev/stdout`): written in place; a rename would replace
    // it with a regular file.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw fail(std::strerror(errno));
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : ENOSPC;
        ::close(fd);
        throw fail(std::strerror(err));
      }
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    return;
  }
  // Through a symbolic link to its file: the rename replaces the file, not the link.
  // (fs::status set `ec` for a file that does not exist yet: that is the usual case here.)
  ec.clear();
  const fs::path target = fs::exists(status) ? fs::canonical(path, ec) : fs::path(path);
  if (ec) throw fail(ec.message());
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw fail(std::strerror(errno));
  const auto abandon = [&](int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(std::strerror(err));
  };
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw abandon(n < 0 ? errno : ENOSPC);
    done += static_cast<std::size_t>(n);
  }
  // mkstemp's 0600, widened to what a plain create would give (0666 less the umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  if (::fsync(fd) != 0 && errno != EINVAL) throw abandon(errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw fail(std::strerror(err));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw fail(std::strerror(err));
  }
}

void warn_input(const std::string& dir, const RunStats& stats) {
  if (stats.world_size_conflicts > 0)
    std::cerr << "laggard: warning: " << dir << ": " << stats.world_size_conflict << " ("
              << stats.world_size_conflicts << " sample"
              << (stats.world_size_conflicts == 1 ? "" : "s")
              << " disagree with the first; are these files from one run?)\n";
}

Progress::Progress(std::string what, bool enabled)
    : what_(std::move(what)), enabled_(enabled && isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { finish(); }

void Progress::update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  shown_ = true;
  const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0.0;
  std::cerr << "\r" << what_ << " " << fixed(pct, 0) << "% (" << fixed(static_cast<double>(done) / 1e6, 1) << " of "
            << fixed(static_cast<double>(total) / 1e6, 1) << " MB)   " << std::flush;
}

void Progress::finish() {
  if (!enabled_ || !shown_) return;
  std::cerr << "\r" << std::string(what_.size() + 40, ' ') << "\r" << std::flush;
  shown_ = false;
}

TraceOptions progress_options(Progress& progress) {
  TraceOptions options;
  options.progress = [&progress](std::uint64_t done, std::uint64_t total) {
    progress.update(done, total);
  };
  return options;
}

}  // namespace laggard::cli
