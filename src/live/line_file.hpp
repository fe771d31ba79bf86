// An append-only JSON Lines file (rank logs, reports.jsonl): the C++ Analyzer's and the Python
// side channel's. Private.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace laggard {

// An append-only JSON Lines file, opened on first use. Each line goes to the kernel in write()
// calls of its own, straight from the caller's buffer: nothing is buffered in the process, so
// no exit path (exit(), a destructor, a signal) ever writes a line again or blocks the thread
// that exits on a slow disk; only the thread that calls write() waits for the disk. A failed
// write may leave part of a line behind; the next write starts on a fresh line, so only that
// one is lost. Not thread-safe: one writer.
class LineFile {
 public:
  LineFile() = default;
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;
  ~LineFile() { close(); }
  /// False on failure, with `error` saying why.
  bool write(const std::string& path, std::string_view line, std::string& error) {
    if (fd_ < 0) {
      std::error_code ec;
      const auto parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent, ec);
      fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) {
        error = "cannot open " + path + ": " + std::strerror(errno);
        return false;
      }
    }
    if (torn_ && !write_all("\n", error, path)) return fail();
    if (!write_all(line, error, path)) return fail();
    torn_ = false;
    return true;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  bool write_all(std::string_view data, std::string& error, const std::string& path) {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = "cannot write " + path + ": " + std::strerror(n < 0 ? errno : EIO);
        return false;
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  bool fail() {
    torn_ = true;
    close();  // reopened next time: the directory may come back
    return false;
  }

  int fd_ = -1;
  bool torn_ = false;
};

}  // namespace laggard
