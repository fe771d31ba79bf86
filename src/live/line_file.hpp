// An append-only JSON Lines file (rank logs, reports.jsonl): the C++ Analyzer's and the Python
// side channel's. Private.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace laggard {

// An append-only JSON Lines file, opened on first use and flushed per line. A failed write
// may leave half a line behind; the next write starts on a fresh line, so only that one is lost.
class LineFile {
 public:
  LineFile() = default;
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;
  ~LineFile() { close(); }
  /// False on failure, with `error` saying why.
  bool write(const std::string& path, std::string_view line, std::string& error) {
    if (file_ == nullptr) {
      std::error_code ec;
      const auto parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent, ec);
      file_ = std::fopen(path.c_str(), "a");
      if (file_ == nullptr) {
        error = "cannot open " + path + ": " + std::strerror(errno);
        return false;
      }
    }
    if (torn_) std::fputc('\n', file_);
    const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() &&
                    std::fflush(file_) == 0;
    if (!ok) {
      error = "cannot write " + path + ": " + std::strerror(errno);
      torn_ = true;
      close();  // reopened next time: the directory may come back
      return false;
    }
    torn_ = false;
    return true;
  }
  void close() {
    if (file_ != nullptr) std::fclose(file_);
    file_ = nullptr;
  }

 private:
  std::FILE* file_ = nullptr;
  bool torn_ = false;
};

}  // namespace laggard
