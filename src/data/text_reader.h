// Reading text corpora: plain files, gzip (.gz, through zlib) and xz (.xz, through liblzma, or the
// `xz` program when attnlab was built without liblzma). The format is detected from the file's
// first bytes, not its name. Everything streams: a file is never held in memory whole unless
// read_text_file() is asked for it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnlab {

class TextStream {
 public:
  virtual ~TextStream() = default;
  // Reads up to n decompressed bytes; returns 0 only at the end of the data. Errors (corrupt
  // compressed data, I/O) throw attnlab::Error naming the file.
  virtual size_t read(char* buf, size_t n) = 0;
  // Bytes of the file consumed so far (compressed bytes for .gz/.xz), for progress and ETA;
  // -1 when unknown (the external xz program).
  virtual int64_t file_bytes_consumed() const = 0;
  const std::string& path() const { return path_; }

 protected:
  explicit TextStream(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Opens `path`, choosing plain / gzip / xz by its magic bytes.
std::unique_ptr<TextStream> open_text_stream(const std::string& path);
// The xz fallback used without liblzma: runs `xz -dc` on the file (exposed for tests).
std::unique_ptr<TextStream> open_xz_with_program(const std::string& path);

// The whole decompressed content of a file.
std::string read_text_file(const std::string& path);

// Splits a stream into documents at `delimiter` (empty: the whole stream is one document).
// Trailing newlines are trimmed from each document, and documents that are empty after trimming
// are skipped, so "A\n\n\nB\n" with delimiter "\n\n\n" yields "A" and "B".
class DocumentReader {
 public:
  DocumentReader(std::unique_ptr<TextStream> stream, std::string delimiter);
  // Moves the next document into `doc`; false at the end.
  bool next(std::string& doc);
  const TextStream& stream() const { return *stream_; }

 private:
  bool fill();  // reads more data into buffer_; false at the end of the stream

  std::unique_ptr<TextStream> stream_;
  std::string delimiter_;
  std::string buffer_;
  std::vector<char> chunk_;  // read target (appended to buffer_)
  size_t begin_ = 0;         // start of the unconsumed part of buffer_
  size_t scan_ = 0;          // delimiter search resumes here
  bool eof_ = false;
};

}  // namespace attnlab
