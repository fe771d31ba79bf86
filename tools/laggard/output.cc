#include "output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>

#include "commands.hpp"

namespace laggard::cli {

Json number_or_null(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

namespace {

// `path` with its symbolic links followed, one at a time, as far as they are trusted: a link
// owned by the user running laggard or by root. A link owned by anyone else is refused, never
// followed (in a shared directory another user can plant one to make laggard write over a file
// of yours). Returns the path to write: an existing file that is not a link, or a new name.
std::string follow_trusted_links(const std::string& path, const std::function<UsageError(const std::string&)>& fail) {
  std::string p = path;
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) return p;  // a new file
      throw fail(std::strerror(errno));
    }
    if (!S_ISLNK(st.st_mode)) return p;
    if (hops >= 40) throw fail("too many levels of symbolic links");
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0) throw fail(std::strerror(errno));
    target.resize(static_cast<std::size_t>(n));
    if (st.st_uid != ::geteuid() && st.st_uid != 0)
      throw fail((p == path ? std::string("it is") : p + " is") +
                 " a symbolic link owned by another user (uid " + std::to_string(st.st_uid) +
                 ") to " + printable(target) +
                 ": not followed; remove it, or name the file itself");
    // A trusted link to a terminal, pipe or device (`-o /dev/stdout`, whose /proc/self/fd/1
    // names "pipe:[N]", no path): written in place through the link.
    struct stat followed {};
    if (::stat(p.c_str(), &followed) == 0 && !S_ISREG(followed.st_mode) &&
        !S_ISDIR(followed.st_mode))
      return p;
    if (!target.empty() && target.front() != '/') {
      const std::size_t slash = p.rfind('/');
      if (slash != std::string::npos) target = p.substr(0, slash + 1) + target;
    }
    p = target;
  }
}

}  // namespace

void write_file_replacing(const std::string& path, const std::string& text,
                          const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (fs::equivalent(path, input, ec) && !ec)
      throw UsageError{"refusing to write " + path + ": it is an input of this run (" + input +
                       ")"};
  }
  const std::function<UsageError(const std::string&)> fail = [&path](const std::string& why) {
    return UsageError{"cannot write " + path + ": " + why};
  };
  const std::string target = follow_trusted_links(path, fail);
  struct stat st {};
  const bool exists = ::lstat(target.c_str(), &st) == 0;
  const bool trusted_link = exists && S_ISLNK(st.st_mode);  // to a device: see above
  if (exists && S_ISDIR(st.st_mode)) throw fail("it is a directory");
  if (exists && !S_ISREG(st.st_mode)) {
    // A device, a FIFO, a terminal (`-o /dev/stdout`): written in place; a rename would replace
    // it with a regular file. O_NOFOLLOW unless it is the trusted link just checked: not
    // through a link put there since it was looked at.
    const int fd =
        ::open(target.c_str(), O_WRONLY | O_CLOEXEC | (trusted_link ? 0 : O_NOFOLLOW));
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
  // A new file of our own (mkstemp: O_CREAT | O_EXCL, mode 0600) in the target's directory,
  // renamed over the target once complete: a full disk or a crash leaves the target as it was,
  // and the rename replaces the directory entry, never writes through a link.
  const std::size_t slash = target.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : target.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? target : target.substr(slash + 1);
  std::string tmp = dir + "." + base + ".tmp-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
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
  if (exists) {
    // The file it replaces keeps its mode (a 0600 report stays 0600), and its owner when root
    // writes it.
    if (::fchmod(fd, st.st_mode & 07777) != 0) throw abandon(errno);
    if (::geteuid() == 0 && st.st_uid != 0) (void)::fchown(fd, st.st_uid, st.st_gid);
  } else {
    // mkstemp's 0600, widened to what a plain create would give (0666 less the umask).
    const mode_t mask = ::umask(0);
    ::umask(mask);
    if (::fchmod(fd, 0666 & ~mask) != 0) throw abandon(errno);
  }
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
