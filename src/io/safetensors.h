// The Hugging Face safetensors format (https://huggingface.co/docs/safetensors):
//   [8 bytes]  N, little-endian u64: length of the header
//   [N bytes]  JSON: {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//                     "__metadata__": {"<key>": "<string value>", ...}}
//              (UTF-8, starts with '{', may be padded with trailing spaces; we pad to 8 bytes)
//   [rest]     the byte buffer; data_offsets are relative to its start, little-endian, row-major.
// Tensors tile the byte buffer exactly: sorted by begin, each starts where the previous ended and
// the last ends at the end of the file. The reader enforces all of this; the writer produces it,
// ordering tensors by element size (largest first), then name, so every tensor is aligned to its
// element size (as the reference implementation does).
// Integrity: the writer records the hash of the byte buffer (io/data_hash.h) as the metadata value
// kDataHashKey, and the reader recomputes it on open and refuses a file whose bytes changed since
// (files without the key, written by other tools or before attnlab had it, are read unchecked).
// Other readers (the safetensors library, transformers) ignore the key.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace attnlab::io {

inline constexpr const char* kDataHashKey = "attnlab_data_hash";

// dtypes a safetensors file may hold here. F16 and I64 exist for foreign checkpoints: they can be
// read raw and (F16) converted on load, but have no attnlab DType of their own.
enum class StDType : uint8_t { F32, BF16, F16, I32, U16, U32, I64 };

const char* st_dtype_name(StDType t);  // "F32", ...
// The flat index of the first NaN or infinity among n elements of float dtype t (F32, BF16,
// F16), -1 if none; OpenMP-parallel.
int64_t first_non_finite(const std::byte* src, StDType t, int64_t n);
size_t st_dtype_size(StDType t);
StDType st_dtype_of(DType t);
// The attnlab DType for a file dtype; throws for F16/I64 (which have none).
DType dtype_of(StDType t);

struct TensorInfo {
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data buffer

  int64_t numel() const;
  std::string shape_str() const;  // "[768, 2304]"
};

// Collects tensors and metadata, then streams them to a file in one pass. Tensors are referenced,
// not copied: they must stay alive and unchanged until write() returns. CUDA tensors are copied to
// the host through a bounded staging buffer, so no second host copy of the whole model is made.
class SafetensorsWriter {
 public:
  void add(const std::string& name, const Tensor& t);
  // Bytes that have no attnlab DType (F16, I64) or more than Shape::kMaxDims dims. `data` is host
  // memory of numel(shape) * st_dtype_size(dtype) bytes.
  void add_raw(const std::string& name, StDType dtype, std::vector<int64_t> shape,
               const void* data);
  void set_metadata(const std::string& key, const std::string& value);
  void set_metadata(const std::map<std::string, std::string>& metadata);

  // Header as the file will contain it (padded), but for kDataHashKey's value, which is 16
  // zeros here and the data's hash in the file (the same length).
  std::string header_json() const;
  // Writes atomically (see io/atomic_file.h): an interrupted write leaves any old file intact.
  // A kDataHashKey set as metadata is replaced by the hash of the data written.
  void write(const std::string& path) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;
    const void* data;
    Device device;
    size_t bytes;
  };
  std::vector<const Entry*> ordered() const;

  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A safetensors file, memory-mapped read-only and fully validated on open (the header, and the
// data's hash where the header records one: a read of the whole file, in parallel). Views point
// into the mapping and stay valid for the lifetime of this object.
class SafetensorsFile {
 public:
  // header_only: skip the data hash (a read of every byte), for callers that read the header and
  // metadata only; one that reads tensors must open the file with verify.
  enum class DataCheck { verify, header_only };
  explicit SafetensorsFile(const std::string& path, DataCheck check = DataCheck::verify);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Names in file (data) order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Zero-copy host view. Do not write through it (the mapping is read-only). Requires an attnlab
  // DType, at most Shape::kMaxDims dims and data aligned to the element size.
  Tensor view(const std::string& name) const;
  // The tensor's bytes, for any dtype.
  std::span<const std::byte> raw(const std::string& name) const;
  // Copies the tensor into `dst` (cpu or cuda). Shapes must match exactly; dtypes must match or
  // convert: F32 <-> BF16 (round to nearest even), F16 -> F32/BF16.
  void load_into(const std::string& name, const Tensor& dst) const;

 private:
  void parse_header(const char* json, size_t len);
  void check_data_hash() const;
  const std::byte* data_ptr(const TensorInfo& ti) const;

  std::string path_;
  void* map_ = nullptr;
  size_t file_size_ = 0;
  size_t data_start_ = 0;  // 8 + N
  std::vector<std::string> names_;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace attnlab::io
