#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace attnlab::io {
namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;  // writes smaller than this are batched

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// fsync a directory so that a rename inside it is durable. Some filesystems do not support
// fsync on directories (EINVAL); the rename itself has still happened, so that is not an error.
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) ATTN_FAIL("cannot open directory '%s': %s", dir.c_str(), errno_text(errno).c_str());
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    ATTN_FAIL("cannot sync directory '%s': %s", dir.c_str(), errno_text(err).c_str());
}

}  // namespace

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not be `buf`.
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return msg;
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), temp_path_(path_ + ".tmp") {
  ATTN_REQUIRE(!path_.empty(), "cannot write a file with an empty path");
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) ATTN_FAIL("cannot write '%s': %s", temp_path_.c_str(), errno_text(errno).c_str());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) abandon();
}

void AtomicFileWriter::abandon() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(std::span<const std::byte> data) { write(data.data(), data.size()); }
void AtomicFileWriter::write(std::string_view data) { write(data.data(), data.size()); }

void AtomicFileWriter::write(const void* data, size_t bytes) {
  ATTN_REQUIRE(fd_ >= 0 && !committed_, "cannot write '%s': the file was already committed",
               temp_path_.c_str());
  const char* src = static_cast<const char*>(data);
  if (buffered_ + bytes <= kBufferBytes) {
    if (buffer_.empty()) buffer_.resize(kBufferBytes);
    if (bytes) std::memcpy(buffer_.data() + buffered_, src, bytes);
    buffered_ += bytes;
  } else {
    flush_buffer();
    write_all(fd_, src, bytes, temp_path_);
  }
  bytes_written_ += bytes;
}

void AtomicFileWriter::overwrite(size_t offset, const void* data, size_t bytes) {
  ATTN_REQUIRE(fd_ >= 0 && !committed_, "cannot write '%s': the file was already committed",
               temp_path_.c_str());
  ATTN_REQUIRE(offset + bytes <= bytes_written_,
               "cannot overwrite bytes %zu .. %zu of '%s': only %zu were written", offset,
               offset + bytes, temp_path_.c_str(), bytes_written_);
  flush_buffer();
  // There and back: later writes go on at the end.
  if (::lseek(fd_, off_t(offset), SEEK_SET) < 0)
    ATTN_FAIL("cannot write '%s': %s", temp_path_.c_str(), errno_text(errno).c_str());
  write_all(fd_, data, bytes, temp_path_);
  if (::lseek(fd_, 0, SEEK_END) < 0)
    ATTN_FAIL("cannot write '%s': %s", temp_path_.c_str(), errno_text(errno).c_str());
}

void AtomicFileWriter::flush_buffer() {
  if (buffered_ == 0) return;
  write_all(fd_, buffer_.data(), buffered_, temp_path_);
  buffered_ = 0;
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      ATTN_FAIL("cannot write '%s': %s", path.c_str(), errno_text(errno).c_str());
    }
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFileWriter::commit() {
  ATTN_REQUIRE(fd_ >= 0 && !committed_, "cannot commit '%s' twice", path_.c_str());
  flush_buffer();
  if (::fsync(fd_) != 0)
    ATTN_FAIL("cannot write '%s': fsync failed: %s", temp_path_.c_str(), errno_text(errno).c_str());
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0)
    ATTN_FAIL("cannot write '%s': close failed: %s", temp_path_.c_str(), errno_text(errno).c_str());
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    ATTN_FAIL("cannot rename '%s' to '%s': %s", temp_path_.c_str(), path_.c_str(),
              errno_text(errno).c_str());
  committed_ = true;
  fsync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, std::span<const std::byte> data) {
  AtomicFileWriter w(path);
  w.write(data);
  w.commit();
}

void write_file_atomic(const std::string& path, std::string_view data) {
  write_file_atomic(path, std::as_bytes(std::span<const char>(data.data(), data.size())));
}

void ensure_dir(const std::string& dir) {
  ATTN_REQUIRE(!dir.empty(), "cannot create a directory with an empty path");
  // Create each prefix in turn ("a", "a/b", "a/b/c"); existing directories are fine.
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    std::string prefix = dir.substr(0, pos);
    if (prefix.empty() || prefix == "/" || prefix.back() == '/') continue;
    if (::mkdir(prefix.c_str(), 0755) == 0) continue;
    int err = errno;
    struct stat st {};
    if (err == EEXIST) {
      if (::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
      ATTN_FAIL("cannot create directory '%s': '%s' exists and is not a directory", dir.c_str(),
                prefix.c_str());
    }
    if (err == ENOTDIR)  // an earlier component is a file
      ATTN_FAIL("cannot create directory '%s': a parent of '%s' is not a directory", dir.c_str(),
                prefix.c_str());
    ATTN_FAIL("cannot create directory '%s': %s", prefix.c_str(), errno_text(err).c_str());
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    ATTN_FAIL("directory '%s' is not writable: %s", dir.c_str(), errno_text(errno).c_str());
}

std::string read_file(const std::string& path, std::string_view what) {
  const std::string what_ = what.empty() ? std::string() : std::string(what) + " ";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    ATTN_FAIL("cannot read %s'%s': %s", what_.c_str(), path.c_str(), errno_text(errno).c_str());
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ATTN_FAIL("cannot read %s'%s': %s", what_.c_str(), path.c_str(), errno_text(err).c_str());
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

}  // namespace attnlab::io
