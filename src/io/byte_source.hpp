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

#include "io/gzip_check.hpp"
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
      // Read front to back once: a larger read-ahead for a file not in the page cache.
      if (S_ISREG(st.st_mode)) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
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
      // The member's check is computed here (gzip_crc32) and compared with its trailer:
      // zlib's own CRC-32 cost as much as inflating.
      inflateValidate(&z_, 0);
      inflateGetHeader(&z_, &header_);
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
        keep_tail(in_.data(), in_len_);
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
      Bytef* const out = z_.next_out;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      check_output(out, static_cast<std::size_t>(z_.next_out - out));
      if (rc == Z_STREAM_END) {
        if (const char* wrong = check_trailer()) {
          error_ = std::string("the gzip stream is broken (") + wrong + ")";
          done_ = true;
          break;
        }
        stream_end_ = true;
        // Concatenated gzip members are one file (gzip -c a b): go on with the next.
        if (inflateReset(&z_) != Z_OK) {
          done_ = true;
          break;
        }
        inflateGetHeader(&z_, &header_);
        member_check_ = 0;
        member_bytes_ = 0;
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
  // The running check of the member's text: CRC-32 for a gzip member, Adler-32 for a zlib one
  // (inflateInit2's 15 + 32 takes either after the first). The header comes before any text, so
  // header_.done (1 gzip, -1 zlib) is known by then.
  void check_output(const Bytef* p, std::size_t n) {
    if (n == 0) return;
    if (header_.done < 0)
      member_check_ = static_cast<std::uint32_t>(
          adler32_z(member_bytes_ == 0 ? 1 : member_check_, p, static_cast<z_size_t>(n)));
    else
      member_check_ = gzip_crc32(member_check_, p, n);
    member_bytes_ += n;
  }

  // The last (up to 8) input bytes before the present buffer: a member's trailer may begin there.
  void keep_tail(const char* p, std::size_t n) {
    const std::size_t take = std::min<std::size_t>(n, 8);
    const std::size_t keep = std::min<std::size_t>(tail_len_, 8 - take);
    std::memmove(tail_, tail_ + tail_len_ - keep, keep);
    std::memcpy(tail_ + keep, p + n - take, take);
    tail_len_ = keep + take;
  }

  // At a member's end (inflate has taken its trailer): the reason zlib would give when the
  // trailer does not match the text (zlib's words), else nullptr.
  const char* check_trailer() const {
    // The trailer is the last bytes inflate took: of this buffer, and of earlier ones before it.
    unsigned char last[8] = {};
    const std::size_t here = static_cast<std::size_t>(z_.next_in - reinterpret_cast<const Bytef*>(in_.data()));
    const std::size_t from_here = std::min<std::size_t>(here, 8);
    const std::size_t from_tail = std::min<std::size_t>(tail_len_, 8 - from_here);
    std::memcpy(last + 8 - from_here, in_.data() + here - from_here, from_here);
    std::memcpy(last + 8 - from_here - from_tail, tail_ + tail_len_ - from_tail, from_tail);
    const auto le32 = [](const unsigned char* q) {
      return std::uint32_t{q[0]} | std::uint32_t{q[1]} << 8 | std::uint32_t{q[2]} << 16 |
             std::uint32_t{q[3]} << 24;
    };
    if (header_.done < 0) {  // zlib: Adler-32, big-endian, of the text
      const std::uint32_t want = std::uint32_t{last[4]} << 24 | std::uint32_t{last[5]} << 16 |
                                 std::uint32_t{last[6]} << 8 | std::uint32_t{last[7]};
      const std::uint32_t got = member_bytes_ ? member_check_ : 1;
      return want == got ? nullptr : "incorrect data check";
    }
    if (le32(last) != member_check_) return "incorrect data check";
    if (le32(last + 4) != static_cast<std::uint32_t>(member_bytes_)) return "incorrect length check";
    return nullptr;
  }

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
  gz_header header_{};
  std::uint32_t member_check_ = 0;
  std::uint64_t member_bytes_ = 0;
  unsigned char tail_[8] = {};
  std::size_t tail_len_ = 0;
  std::string error_;
};

}  // namespace laggard::detail
