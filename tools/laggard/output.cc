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

Json number_or_null(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

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
  if (stats.rank_mismatches > 0)
    std::cerr << "laggard: warning: " << printable(stats.rank_mismatch) << " ("
              << stats.rank_mismatches << " sample" << (stats.rank_mismatches == 1 ? "" : "s")
              << " in a file named for another rank, used as the rank they hold; are these "
                 "files from one run?)\n";
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
