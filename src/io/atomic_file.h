// Crash-safe file writing: data goes to "<path>.tmp", which is fsync'ed and renamed over <path>
// (then the directory is fsync'ed), so a reader sees either the old file or the complete new one,
// never a torn mix. Checkpoints, configs and run metadata are all written this way.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attnlab::io {

// Writes `data` to `path` atomically (see above). Throws attnlab::Error naming the path and errno.
void write_file_atomic(const std::string& path, std::span<const std::byte> data);
void write_file_atomic(const std::string& path, std::string_view data);

// Streaming variant for large files: write() chunks, then commit(). Until commit() returns, `path`
// is untouched; a writer destroyed without commit() (an exception, an abandoned save) removes its
// temp file and leaves any old `path` intact. Small writes are buffered; large ones go straight
// to the kernel, so the caller never needs a second in-memory copy of the whole file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::span<const std::byte> data);
  void write(std::string_view data);
  void write(const void* data, size_t bytes);
  // Replaces `bytes` bytes at `offset`, all written before (a header's field known only at the
  // end).
  void overwrite(size_t offset, const void* data, size_t bytes);
  // Flush, fsync, rename over the final path, fsync the directory. At most once.
  void commit();

  size_t bytes_written() const { return bytes_written_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void flush_buffer();
  void abandon() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  size_t bytes_written_ = 0;
  std::vector<char> buffer_;
  size_t buffered_ = 0;
};

// Writes all `bytes` to `fd`, retrying short writes and EINTR; throws "cannot write '<path>':
// <errno text>". `path` only names the file in the message.
void write_all(int fd, const void* data, size_t bytes, const std::string& path);

// mkdir -p. Throws when a component cannot be created (naming it and the errno text), when a
// component exists but is not a directory, or when the final directory is not writable.
void ensure_dir(const std::string& dir);

// Whole file as a string; throws naming the path when it cannot be read: "cannot read
// <what> '<path>': <errno text>" (what, e.g. "recipe", is left out when empty).
std::string read_file(const std::string& path, std::string_view what = {});

// "Permission denied" etc. for errno value `err` (thread-safe).
std::string errno_text(int err);

}  // namespace attnlab::io
