// cubin_params.cpp — read a kernel's parameter sizes from a cubin (see cubin_params.hpp).
// ELF64 section headers: e_shoff at 0x28 (u64), e_shentsize/e_shnum/e_shstrndx at 0x3a/0x3c/
// 0x3e (u16); each header: sh_name (u32) at 0, sh_offset (u64) at 0x18, sh_size (u64) at 0x20.
// .nv.info records: format byte, attribute byte, then per format: 1 (no value), 3 (2-byte
// value), 4 (u16 length + that many bytes). KPARAM_INFO (attribute 0x17, format 4, 12 bytes):
// u32 index, u16 ordinal, u16 offset, u32 flags whose bits 18..31 hold the size in bytes.
#include "cubin_params.hpp"

#include <cstring>

namespace aotpack {

namespace {

constexpr uint8_t kFormatNoValue = 1, kFormatHalf = 3, kFormatSized = 4;
constexpr uint8_t kKparamInfo = 0x17;

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// [off, off + len) lies inside an image of `size` bytes.
bool inside(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

// Parses the records of one .nv.info.<entry> section; false when unreadable.
bool parse_records(const uint8_t* p, uint64_t n, std::vector<uint32_t>* sizes) {
  std::vector<int64_t> by_ordinal;
  uint64_t i = 0;
  while (i < n) {
    if (n - i < 2) return false;
    uint8_t format = p[i], attr = p[i + 1];
    if (format == kFormatNoValue) {
      i += 2;
    } else if (format == kFormatHalf) {
      i += 4;
    } else if (format == kFormatSized) {
      if (n - i < 4) return false;
      uint64_t len = le(p + i + 2, 2);
      if (!inside(i + 4, len, n)) return false;
      if (attr == kKparamInfo) {
        if (len < 12) return false;
        uint64_t ordinal = le(p + i + 8, 2);
        uint32_t bytes = uint32_t(le(p + i + 12, 4) >> 18);
        if (ordinal >= 4096) return false;  // CUDA allows 32764 bytes of parameters
        if (by_ordinal.size() <= ordinal) by_ordinal.resize(ordinal + 1, -1);
        if (by_ordinal[ordinal] >= 0) return false;
        by_ordinal[ordinal] = bytes;
      }
      i += 4 + len;
    } else {
      return false;  // a record format this reader does not know: no table
    }
  }
  for (int64_t b : by_ordinal)
    if (b < 0) return false;  // a gap: not a table we understand
  for (int64_t b : by_ordinal) sizes->push_back(uint32_t(b));
  return !sizes->empty();
}

}  // namespace

bool cubin_param_sizes(const uint8_t* image, uint64_t size, const std::string& entry,
                       std::vector<uint32_t>* sizes) {
  sizes->clear();
  if (size < 64 || std::memcmp(image, "\x7f" "ELF", 4) != 0 || image[4] != 2 || image[5] != 1)
    return false;
  const uint64_t shoff = le(image + 0x28, 8), shentsize = le(image + 0x3a, 2),
                 shnum = le(image + 0x3c, 2), shstrndx = le(image + 0x3e, 2);
  if (shentsize < 0x28 || shstrndx >= shnum || shnum > size / shentsize ||
      !inside(shoff, shnum * shentsize, size))
    return false;
  const uint8_t* strtab_hdr = image + shoff + shstrndx * shentsize;
  const uint64_t stroff = le(strtab_hdr + 0x18, 8), strsize = le(strtab_hdr + 0x20, 8);
  if (!inside(stroff, strsize, size)) return false;
  const std::string want = ".nv.info." + entry;
  for (uint64_t s = 0; s < shnum; ++s) {
    const uint8_t* h = image + shoff + s * shentsize;
    uint64_t name = le(h, 4), off = le(h + 0x18, 8), len = le(h + 0x20, 8);
    if (name >= strsize || strsize - name < want.size() + 1) continue;
    const char* n = reinterpret_cast<const char*>(image + stroff + name);
    if (std::memcmp(n, want.data(), want.size()) != 0 || n[want.size()] != '\0') continue;
    if (!inside(off, len, size)) return false;
    return parse_records(image + off, len, sizes);
  }
  return false;
}

}  // namespace aotpack
