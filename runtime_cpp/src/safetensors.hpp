// safetensors.hpp — read-only safetensors files (bounds-checked, read whole or by ranges) and
// a small writer (used by aotpack-run --outputs and by the tests to build bundles).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "host_pages.hpp"
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

// A regular file opened for reading by ranges (pread: from any thread, in any order).
class OpenFile {
 public:
  // Opens `path`; throws Error(IO) naming `what` and the path when it cannot be opened or is
  // not a regular file (a FIFO or a device would block or never end).
  OpenFile(const std::string& path, const std::string& what);
  ~OpenFile();
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  uint64_t size() const { return size_; }  // when it was opened
  // Copies [offset, offset + n) into dst (n <= size() - offset); Error(IO) when the file
  // shrank meanwhile or the read fails. Thread-safe.
  void read(uint64_t offset, uint64_t n, uint8_t* dst) const;
  // The fraction (0..1) of [offset, offset + n) that is in the page cache now (mincore over a
  // mapping that is never touched, so a file truncated meanwhile cannot fault); 0 when the
  // system cannot say.
  double cached_fraction(uint64_t offset, uint64_t n) const;
  // Error(IO) when the file's size is no longer size(): it was rewritten while we read it.
  void check_unchanged() const;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const std::string& what() const { return what_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_, what_;
};

// The bytes of a whole regular file, read into memory. Not a mapping on purpose: a mapped file
// truncated by another process while we read it kills this one with SIGBUS; a copy turns that
// into a status (the file shrank or changed while it was read).
class FileBytes {
 public:
  // Reads all of `file` (8 threads for big files); Error(IO) as OpenFile::read, or when it
  // changed size; Error(OUT_OF_MEMORY) when the copy cannot be allocated.
  explicit FileBytes(const OpenFile& file);
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  const uint8_t* data() const { return pages_.data(); }
  uint64_t size() const { return size_; }

 private:
  HostPages pages_;
  uint64_t size_ = 0;
};

// A parsed safetensors file. Every entry's byte range is verified to lie inside the data
// section and to match dtype × shape, so tensor_data() never reads out of bounds.
class SafetensorsFile {
 public:
  // Whole: the file is read into memory at once. HeaderOnly: only the header is read; the
  // tensors are read by ranges (read()) or all at once later (load_contents()): a load
  // streams big weights to the device without holding them all in host memory.
  enum Contents { Whole, HeaderOnly };
  // Opens and validates `path`; `what` ("bundle", "external weights file") prefixes errors.
  SafetensorsFile(const std::string& path, const std::string& what, Contents contents = Whole);
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* find(const std::string& name) const;
  // The tensor's bytes in memory: only once the contents are (Whole, or load_contents()).
  const uint8_t* tensor_data(const TensorEntry& t) const;
  // Reads the whole file into memory (a HeaderOnly file; nothing when it is there already).
  void load_contents();
  bool in_memory() const { return bytes_ != nullptr; }
  // Copies [offset, offset + n) of the file into dst: from memory when the contents are
  // there, else from the file (Error(IO) when it shrank). Thread-safe.
  void read(uint64_t offset, uint64_t n, uint8_t* dst) const;
  // OpenFile::cached_fraction; 1 when the contents are in memory.
  double cached_fraction(uint64_t offset, uint64_t n) const {
    return in_memory() ? 1.0 : file_.cached_fraction(offset, n);
  }
  // The bytes of tensor `t`, read from the file or copied from memory.
  std::vector<uint8_t> read_tensor(const TensorEntry& t) const;
  // Error(IO) when the file changed size since it was opened (HeaderOnly: after streaming).
  void check_unchanged() const { file_.check_unchanged(); }
  // Refuses gaps, overlaps and trailing bytes: in a bundle (and its weights file) every byte
  // of the data section belongs to exactly one tensor (aotpack's writer names its alignment
  // padding "__aotpack__.pad.<i>"), as safetensors readers and the Python reader require.
  void check_contiguous(const std::string& what) const;
  // The "__metadata__" object (type Null when absent).
  const json::Value& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  void parse_header(const uint8_t* header, uint64_t n, const std::string& where);
  OpenFile file_;
  std::unique_ptr<FileBytes> bytes_;  // the whole file, once read
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
