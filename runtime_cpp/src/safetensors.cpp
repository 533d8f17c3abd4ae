// safetensors.cpp — reader (read, not mapped) with full bounds checks + a small writer.
#include "safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dtype.hpp"
#include "error.hpp"
#include "parallel.hpp"

namespace aotpack {

namespace {
// Headers larger than this are refused (same limit as the reference implementation):
// protects against allocating gigabytes for a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Reads [offset, offset + n) of `fd` into `dst`. Returns 0, or the errno of a failed read, or
// -1 when the file ended early.
int read_range(int fd, uint8_t* dst, uint64_t offset, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd, dst + done, size_t(std::min<uint64_t>(n - done, 1ull << 30)),
                          off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got == 0 ? -1 : errno;
    done += uint64_t(got);
  }
  return 0;
}

}  // namespace

OpenFile::OpenFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) fail(AOTPACK_IO, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(AOTPACK_IO, "cannot read ", what, " '", path, "': not a regular file (a directory, "
         "FIFO or device): pass the file itself");
  }
  size_ = uint64_t(st.st_size);
}

OpenFile::~OpenFile() { ::close(fd_); }

void OpenFile::read(uint64_t offset, uint64_t n, uint8_t* dst) const {
  int status = read_range(fd_, dst, offset, n);
  if (status == -1)
    fail(AOTPACK_IO, what_, " '", path_, "' shrank from ", size_, " bytes while it was read ",
         "(is it being rewritten?): try again once it is complete");
  if (status != 0)
    fail(AOTPACK_IO, "cannot read ", what_, " '", path_, "': ", std::strerror(status));
}

double OpenFile::cached_fraction(uint64_t offset, uint64_t n) const {
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  if (n == 0 || offset >= size_) return 1.0;
  n = std::min(n, size_ - offset);
  const uint64_t start = offset / page * page, len = offset + n - start;
  void* map = ::mmap(nullptr, size_t(len), PROT_READ, MAP_SHARED, fd_, off_t(start));
  if (map == MAP_FAILED) return 0.0;
  std::vector<unsigned char> resident(size_t((len + page - 1) / page));
  uint64_t cached = 0;
  if (::mincore(map, size_t(len), resident.data()) == 0)
    for (unsigned char r : resident) cached += r & 1;
  ::munmap(map, size_t(len));
  return double(cached) / double(resident.size());
}

void OpenFile::check_unchanged() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0 || uint64_t(st.st_size) != size_)
    fail(AOTPACK_IO, what_, " '", path_, "' changed size while it was read (is it being "
         "rewritten?): try again once it is complete");
}

FileBytes::FileBytes(const OpenFile& file) : pages_(file.size()), size_(file.size()) {
  if (!pages_.data())
    fail(AOTPACK_OUT_OF_MEMORY, "cannot allocate ", size_, " bytes of host memory to read ",
         file.what(), " '", file.path(), "'");
  // Pieces of 64 MiB on up to 8 threads (reading from the page cache is a memory copy, ~5 GB/s
  // per core; the first touch of fresh pages costs as much again).
  constexpr uint64_t kPiece = 64ull << 20;
  uint8_t* dst = pages_.data();
  parallel_for(size_t((size_ + kPiece - 1) / kPiece), size_ < 2 * kPiece ? 1 : 8, [&](size_t i) {
    uint64_t begin = i * kPiece;
    file.read(begin, std::min(size_, begin + kPiece) - begin, dst + begin);
  });
  file.check_unchanged();
}

SafetensorsFile::SafetensorsFile(const std::string& path, const std::string& what,
                                 Contents contents)
    : file_(path, what), path_(path) {
  const std::string where = cat(what, " '", path, "'");
  if (contents == Whole) load_contents();
  if (file_.size() < 8)
    fail(AOTPACK_CORRUPT_BUNDLE, where, " is truncated: ", file_.size(),
         " bytes, a safetensors file starts with an 8-byte header length");
  uint8_t len[8];
  read(0, 8, len);
  uint64_t n = read_le64(len);
  if (n > kMaxHeaderBytes || n > file_.size() - 8)
    fail(AOTPACK_CORRUPT_BUNDLE, where, " is truncated or not a safetensors file: header length ",
         n, " but the file has ", file_.size(), " bytes");
  if (bytes_) {
    parse_header(bytes_->data() + 8, n, where);
  } else {
    std::vector<uint8_t> header(size_t(n ? n : 1));
    read(8, n, header.data());
    parse_header(header.data(), n, where);
  }
}

void SafetensorsFile::load_contents() {
  if (!bytes_) bytes_.reset(new FileBytes(file_));
}

const uint8_t* SafetensorsFile::tensor_data(const TensorEntry& t) const {
  if (!bytes_)
    fail(AOTPACK_INTERNAL, "tensor '", t.name, "' of '", path_, "' used before the file was read");
  return bytes_->data() + t.offset;
}

void SafetensorsFile::read(uint64_t offset, uint64_t n, uint8_t* dst) const {
  if (bytes_) std::memcpy(dst, bytes_->data() + offset, size_t(n));
  else file_.read(offset, n, dst);
}

std::vector<uint8_t> SafetensorsFile::read_tensor(const TensorEntry& t) const {
  std::vector<uint8_t> out(size_t(t.nbytes));
  read(t.offset, t.nbytes, out.data());
  return out;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse_header(const uint8_t* bytes, uint64_t n, const std::string& where) {
  const uint64_t data_start = 8 + n;
  data_start_ = data_start;
  const uint64_t data_size = file_.size() - data_start;
  json::Value header = json::parse(reinterpret_cast<const char*>(bytes), n, where + " header");
  if (header.type != json::Type::Object)
    fail(AOTPACK_CORRUPT_BUNDLE, where, ": header is not a JSON object");
  for (const auto& kv : header.fields) {
    if (kv.first == "__metadata__") {
      if (kv.second.type != json::Type::Object)
        fail(AOTPACK_CORRUPT_BUNDLE, where, ": __metadata__ is not an object");
      metadata_ = kv.second;
      continue;
    }
    const json::Value& v = kv.second;
    const std::string tw = cat(where, ": tensor '", kv.first, "'");
    const json::Value* dt = v.find("dtype");
    const json::Value* sh = v.find("shape");
    const json::Value* off = v.find("data_offsets");
    if (!dt || dt->type != json::Type::String || !sh || sh->type != json::Type::Array || !off ||
        off->type != json::Type::Array || off->items.size() != 2)
      fail(AOTPACK_CORRUPT_BUNDLE, tw, " needs dtype (string), shape (array), data_offsets [b, e]");
    TensorEntry t;
    t.name = kv.first;
    t.dtype = dt->s;
    uint64_t elems = 1;
    for (const auto& d : sh->items) {
      if (d.type != json::Type::Int || d.i < 0)
        fail(AOTPACK_CORRUPT_BUNDLE, tw, ": shape entries must be non-negative integers");
      t.shape.push_back(d.i);
      if (__builtin_mul_overflow(elems, uint64_t(d.i), &elems))
        fail(AOTPACK_CORRUPT_BUNDLE, tw, ": shape overflows");
    }
    size_t esize = safetensors_dtype_size(t.dtype);
    if (esize == 0) fail(AOTPACK_CORRUPT_BUNDLE, tw, ": unknown dtype '", t.dtype, "'");
    const json::Value& b = off->items[0];
    const json::Value& e = off->items[1];
    if (b.type != json::Type::Int || e.type != json::Type::Int || b.i < 0 || e.i < b.i ||
        uint64_t(e.i) > data_size)
      fail(AOTPACK_CORRUPT_BUNDLE, tw, ": data_offsets [", b.i, ", ", e.i,
           "] are outside the data section (", data_size, " bytes); the file may be truncated");
    uint64_t expect = 0;
    if (__builtin_mul_overflow(elems, uint64_t(esize), &expect) ||
        expect != uint64_t(e.i - b.i))
      fail(AOTPACK_CORRUPT_BUNDLE, tw, ": data_offsets cover ", e.i - b.i,
           " bytes but dtype and shape need ", expect);
    t.offset = data_start + uint64_t(b.i);
    t.nbytes = expect;
    by_name_[t.name] = tensors_.size();  // JSON parser already refused duplicate keys
    tensors_.push_back(std::move(t));
  }
}

void SafetensorsFile::check_contiguous(const std::string& what) const {
  std::vector<const TensorEntry*> order;
  for (const TensorEntry& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
  });
  uint64_t pos = data_start_;
  for (const TensorEntry* t : order) {
    if (t->offset != pos)
      fail(AOTPACK_CORRUPT_BUNDLE, what, " '", path_, "': tensor '", t->name, "' does not start "
           "where the previous one ends (overlap or gap): the file is corrupt");
    pos += t->nbytes;
  }
  if (pos != file_.size())
    fail(AOTPACK_CORRUPT_BUNDLE, what, " '", path_, "': data section ends at byte ", pos,
         " but the file has ", file_.size(), " bytes: the file is truncated or has trailing data");
}

namespace {
void write_all(std::FILE* f, const void* p, size_t n, const std::string& path) {
  if (n && std::fwrite(p, 1, n, f) != n) {
    std::fclose(f);
    fail(AOTPACK_IO, "cannot write '", path, "': ", std::strerror(errno));
  }
}
uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// The file with the data section starting `alignment`-aligned and each tensor too, or, when
// `packed`, each tensor right after the previous one (their gaps are tensors already).
void write_file(const std::string& path, const std::vector<TensorToWrite>& tensors,
                const std::vector<std::pair<std::string, std::string>>& metadata,
                uint64_t alignment, bool packed) {
  // Lay out the data section first: header length depends on the offsets' digits, so
  // offsets are relative to the data start and the header is padded afterwards.
  std::vector<uint64_t> begins;
  uint64_t cursor = 0;
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i)
      header += (i ? "," : "") + json::quote(metadata[i].first) + ":" +
                json::quote(metadata[i].second);
    header += "}";
    first = false;
  }
  for (const auto& t : tensors) {
    if (!packed) cursor = round_up(cursor, alignment);
    begins.push_back(cursor);
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    header += std::string(first ? "" : ",") + json::quote(t.name) + ":{\"dtype\":" +
              json::quote(t.dtype) + ",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(cursor) + "," + std::to_string(cursor + t.nbytes) + "]}";
    first = false;
    cursor += t.nbytes;
  }
  header += "}";
  // Pad the header with spaces so the data section starts on an aligned file offset;
  // then every tensor is aligned relative to the file start too.
  uint64_t hlen = round_up(8 + header.size(), alignment) - 8;
  header.append(hlen - header.size(), ' ');

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail(AOTPACK_IO, "cannot create '", path, "': ", std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(hlen >> (8 * i));
  write_all(f, len, 8, path);
  write_all(f, header.data(), header.size(), path);
  uint64_t pos = 0;
  static const uint8_t zeros[256] = {0};
  for (size_t i = 0; i < tensors.size(); ++i) {
    while (pos < begins[i]) {
      size_t gap = size_t(begins[i] - pos < sizeof(zeros) ? begins[i] - pos : sizeof(zeros));
      write_all(f, zeros, gap, path);
      pos += gap;
    }
    write_all(f, tensors[i].data, tensors[i].nbytes, path);
    pos += tensors[i].nbytes;
  }
  if (std::fclose(f) != 0) fail(AOTPACK_IO, "cannot write '", path, "': ", std::strerror(errno));
}
}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata,
                       uint64_t alignment, bool pad_tensors) {
  if (alignment == 0) alignment = 8;
  if (!pad_tensors) return write_file(path, tensors, metadata, alignment, false);
  std::vector<TensorToWrite> padded;  // the same file, with every gap a named zero tensor
  static const std::vector<uint8_t> zeros(4096, 0);
  uint64_t pos = 0;
  for (const TensorToWrite& t : tensors) {
    uint64_t gap = round_up(pos, alignment) - pos;
    if (gap > zeros.size()) fail(AOTPACK_INTERNAL, "alignment too large for pad tensors");
    if (gap)
      padded.push_back({cat("__aotpack__.pad.", padded.size()), "U8", {int64_t(gap)},
                        zeros.data(), gap});
    padded.push_back(t);
    pos += gap + t.nbytes;
  }
  write_file(path, padded, metadata, alignment, true);
}

}  // namespace aotpack
