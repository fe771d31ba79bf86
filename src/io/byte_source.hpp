// The text of a file, plain or gzip-compressed (told apart by its first bytes, not its name), read
// a buffer at a time.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "laggard/jsonl.hpp"

namespace laggard::detail {

/// Reads a file's text in pieces; a gzip file (concatenated members too) is inflated as it goes.
/// Throws InputError when the file cannot be opened or read. Not thread-safe.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw InputError("cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        ::close(fd_);
        throw InputError("cannot read " + path + ": it is a directory, not a regular file");
      }
      size_ = static_cast<std::uint64_t>(st.st_size);
    }
    in_.resize(std::size_t{1} << 18);
    // The first bytes tell gzip (1f 8b) from plain text.
    in_len_ = read_raw(in_.data(), in_.size());
    if (in_len_ >= 2 && static_cast<unsigned char>(in_[0]) == 0x1f &&
        static_cast<unsigned char>(in_[1]) == 0x8b) {
      gzip_ = true;
      std::memset(&z_, 0, sizeof z_);
      if (inflateInit2(&z_, 15 + 32) != Z_OK) {
        ::close(fd_);
        throw InputError("cannot read " + path + ": zlib could not start");
      }
      z_.next_in = reinterpret_cast<Bytef*>(in_.data());
      z_.avail_in = static_cast<uInt>(in_len_);
    }
  }
  ~ByteSource() {
    if (gzip_) inflateEnd(&z_);
    if (fd_ >= 0) ::close(fd_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Up to `cap` bytes of text into dst; 0 at the end. A broken gzip stream ends the text there
  // and sets error().
  std::size_t read(char* dst, std::size_t cap) {
    if (!gzip_) {
      if (in_pos_ < in_len_) {
        const std::size_t n = std::min(cap, in_len_ - in_pos_);
        std::memcpy(dst, in_.data() + in_pos_, n);
        in_pos_ += n;
        return n;
      }
      return read_raw(dst, cap);
    }
    if (done_) return 0;
    z_.next_out = reinterpret_cast<Bytef*>(dst);
    z_.avail_out = static_cast<uInt>(std::min<std::size_t>(cap, 1u << 30));
    while (z_.avail_out > 0) {
      if (z_.avail_in == 0) {
        in_len_ = read_raw(in_.data(), in_.size());
        if (in_len_ == 0) {
          if (!stream_end_) error_ = "the gzip stream ends early";
          done_ = true;
          break;
        }
        z_.next_in = reinterpret_cast<Bytef*>(in_.data());
        z_.avail_in = static_cast<uInt>(in_len_);
      }
      stream_end_ = false;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        stream_end_ = true;
        // Concatenated gzip members are one file (gzip -c a b): go on with the next.
        if (inflateReset(&z_) != Z_OK) {
          done_ = true;
          break;
        }
        continue;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        error_ = std::string("the gzip stream is broken (") + (z_.msg ? z_.msg : "zlib error") + ")";
        done_ = true;
        break;
      }
    }
    return static_cast<std::size_t>(reinterpret_cast<char*>(z_.next_out) - dst);
  }

  std::uint64_t size() const noexcept { return size_; }
  bool gzip() const noexcept { return gzip_; }  ///< the file is gzip-compressed
  std::uint64_t consumed() const noexcept { return consumed_; }
  const std::string& error() const noexcept { return error_; }

 private:
  std::size_t read_raw(char* dst, std::size_t cap) {
    for (;;) {
      const ssize_t n = ::read(fd_, dst, cap);
      if (n >= 0) {
        consumed_ += static_cast<std::uint64_t>(n);
        return static_cast<std::size_t>(n);
      }
      if (errno == EINTR) continue;
      throw InputError("cannot read " + path_ + ": " + std::strerror(errno));
    }
  }

  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t consumed_ = 0;
  std::vector<char> in_;
  std::size_t in_len_ = 0;
  std::size_t in_pos_ = 0;
  bool gzip_ = false;
  bool done_ = false;
  bool stream_end_ = false;
  z_stream z_{};
  std::string error_;
};

}  // namespace laggard::detail
