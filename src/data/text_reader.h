// Reading text corpora: plain files, gzip (.gz, through zlib) and xz (.xz, through liblzma, or the
// `xz` program when attnlab was built without liblzma). The format is detected from the file's
// first bytes, not its name. Everything streams: a file is never held in memory whole unless
// read_text_file() is asked for it.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
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

// The document rules of DocumentReader, applied in place to a buffer that grows at its end (no
// copy per document). `prepare` appends decoded blocks to a batch buffer and takes the documents
// as byte ranges of it.
class DocumentScanner {
 public:
  struct Span {
    size_t begin, end;  // bytes [begin, end) of the buffer; never empty
  };
  explicit DocumentScanner(std::string delimiter) : delimiter_(std::move(delimiter)) {}
  // Appends the documents completed (followed by the delimiter) in text[begin(), ...) to `docs`.
  // `text` is the whole buffer: what an earlier call saw, plus new bytes at its end.
  void scan(std::string_view text, std::vector<Span>& docs);
  // End of the input (a file): text[begin(), end) is its last document.
  void finish(std::string_view text, std::vector<Span>& docs);
  // Start of the incomplete document.
  size_t begin() const { return begin_; }
  // The buffer now starts at what was offset `n` (n <= begin()).
  void drop_prefix(size_t n);

 private:
  void add(std::string_view text, size_t begin, size_t end, std::vector<Span>& docs) const;

  std::string delimiter_;
  size_t begin_ = 0;  // start of the incomplete document
  size_t scan_ = 0;   // the delimiter search resumes here
};

// Decodes `files` on background threads, up to `parallel` files at a time, and hands out their
// bytes in file order, block by block, so that one file's decoding (xz: slower than a few encoding
// threads) overlaps the consumer's work and, with several files, several decoders run at once.
// Files after the one being consumed decode ahead until `ahead_bytes` of decoded text wait in
// memory; the file being consumed is never held back by that budget (it runs at most a few blocks
// ahead), so a long file is decoded by one thread at its stream's speed. Errors of a file
// (unreadable, corrupt) are rethrown by next() in order: after the blocks that were decoded before
// the error.
class ParallelFileReader {
 public:
  static constexpr size_t kBlockBytes = size_t(1) << 20;
  ParallelFileReader(std::vector<std::string> files, int parallel, size_t ahead_bytes);
  ~ParallelFileReader();
  ParallelFileReader(const ParallelFileReader&) = delete;
  ParallelFileReader& operator=(const ParallelFileReader&) = delete;

  // The next block of decoded bytes, moved into `block` (whose old buffer is recycled), and the
  // index of its file. An empty block marks the end of that file (every file, empty or not, ends
  // with one). False after the last file.
  bool next(std::string& block, size_t& file);
  // True when next() would return without waiting for a decoder.
  bool ready();
  // File bytes consumed by the decoders so far, over all files (compressed bytes for .gz/.xz;
  // a file read through the xz program counts only once it is done). For progress and ETA.
  int64_t file_bytes_consumed();

 private:
  struct FileState {
    std::deque<std::string> blocks;
    size_t buffered = 0;  // bytes in `blocks`
    int64_t consumed = 0;
    bool finished = false;
    std::exception_ptr error;
  };
  void decode_files();  // a decoder thread
  bool ready_locked() const;

  const std::vector<std::string> files_;
  const size_t ahead_bytes_;
  std::mutex mutex_;
  std::condition_variable consumer_cv_, decoder_cv_;
  std::vector<FileState> state_;
  std::vector<std::string> free_blocks_;
  size_t next_file_ = 0;  // next file a decoder takes
  size_t current_ = 0;    // file being consumed
  size_t buffered_ = 0;   // decoded bytes waiting, all files
  int64_t consumed_total_ = 0;
  bool stop_ = false;
  std::vector<std::thread> decoders_;
};

}  // namespace attnlab
