// safetensors.hpp — read-only, memory-mapped safetensors files (bounds-checked) and a small
// writer (used by aotpack-run --outputs and by the tests to build bundles).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json.hpp"

namespace aotpack {

// One tensor of a safetensors header. Offsets are absolute within the file.
struct TensorEntry {
  std::string name;
  std::string dtype;           // safetensors spelling: "BF16", "U8", ...
  std::vector<int64_t> shape;  // outermost first
  uint64_t offset = 0;         // absolute file offset of the first byte
  uint64_t nbytes = 0;
};

// The bytes of a whole regular file, read into memory. Not a mapping on purpose: a mapped file
// truncated by another process while we read it kills this one with SIGBUS; a copy turns that
// into a status (the file shrank or changed while it was read).
class FileBytes {
 public:
  // Reads `path`; throws Error(IO) naming `what` and the path when it cannot be opened or
  // read, is not a regular file (a FIFO or a device would block or never end), or changes
  // size while it is read; Error(OUT_OF_MEMORY) when the copy cannot be allocated.
  FileBytes(const std::string& path, const std::string& what);
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  const uint8_t* data() const { return data_.get(); }
  uint64_t size() const { return size_; }

 private:
  struct Unmap {
    uint64_t size;  // no initializer: it would make Unmap unusable inside FileBytes
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Unmap> data_;  // anonymous pages, page-aligned
  uint64_t size_ = 0;
};

// A parsed safetensors file. Every entry's byte range is verified to lie inside the data
// section and to match dtype × shape, so tensor_data() never reads out of bounds.
class SafetensorsFile {
 public:
  // Opens and validates `path`; `what` ("bundle", "external weights file") prefixes errors.
  SafetensorsFile(const std::string& path, const std::string& what);
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* find(const std::string& name) const;
  const uint8_t* tensor_data(const TensorEntry& t) const { return file_.data() + t.offset; }
  // Refuses gaps, overlaps and trailing bytes: in a bundle (and its weights file) every byte
  // of the data section belongs to exactly one tensor (aotpack's writer names its alignment
  // padding "__aotpack__.pad.<i>"), as safetensors readers and the Python reader require.
  void check_contiguous(const std::string& what) const;
  // The "__metadata__" object (type Null when absent).
  const json::Value& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  void parse_header(const std::string& what);
  FileBytes file_;
  std::string path_;
  std::vector<TensorEntry> tensors_;
  uint64_t data_start_ = 0;
  std::unordered_map<std::string, size_t> by_name_;  // big checkpoints have 1000s of tensors
  json::Value metadata_;
};

// A tensor to write: bytes are copied from `data` (nbytes must equal prod(shape) × size).
struct TensorToWrite {
  std::string name;
  std::string dtype;  // safetensors spelling
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t nbytes = 0;
};

// Writes a safetensors file. Tensors are placed in the given order, each at a file offset
// that is a multiple of `alignment` (header padded with spaces, gaps zero-filled).
// Throws Error(IO) on failure.
// With `pad_tensors`, the zero bytes before an aligned tensor are a U8 tensor named
// "__aotpack__.pad.<i>" (bundles: every byte covered, see check_contiguous).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata,
                       uint64_t alignment = 8, bool pad_tensors = false);

}  // namespace aotpack
