// Shared by the fuzz targets: a scratch directory per process, an input split into the files of a
// run directory, quiet commands, and a stop on a broken property.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

namespace laggard::fuzz {

/// A directory of this process's own (under /dev/shm when there is one: no disk writes).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                     ? std::filesystem::path("/dev/shm")
                                     : std::filesystem::temp_directory_path();
    auto d = base / ("laggard-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// `input` split at each `separator` into `dir`/name(0), name(1), ... (at most `files` of them;
/// the last one takes the rest). A fresh `dir` for each input.
template <typename Name>
void split_into_files(const std::filesystem::path& dir, std::string_view input,
                      std::string_view separator, int files, Name name) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  std::size_t start = 0;
  for (int i = 0; i < files && start <= input.size(); ++i) {
    const std::size_t end = std::min(input.find(separator, start), input.size());
    write_file(dir / name(i), input.substr(start, end - start));
    start = end + separator.size();
  }
}

/// The commands print to std::cout and std::cerr: keeps the fuzzer's log quiet while it lives.
struct Silence {
  std::ostringstream sink;
  std::streambuf* out = std::cout.rdbuf(sink.rdbuf());
  std::streambuf* err = std::cerr.rdbuf(sink.rdbuf());
  ~Silence() {
    std::cout.rdbuf(out);
    std::cerr.rdbuf(err);
  }
};

/// A property that must hold broke: say which, and stop (libFuzzer saves the input).
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "property broken: %s\n", what.c_str());
  std::abort();
}

}  // namespace laggard::fuzz
