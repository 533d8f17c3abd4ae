// cubin_params.hpp — the parameter table a cubin declares for a kernel entry (ptxas writes one
// EIATTR_KPARAM_INFO record per parameter into the ELF section ".nv.info.<entry>"), so every
// step's slots can be checked against what the kernel really takes before anything launches:
// the driver copies each parameter with the size the cubin declares, whatever we pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aotpack {

// Byte size of each parameter of `entry`, in order, read with full bounds checks from the
// cubin's ELF image. Returns false (and leaves *sizes empty) when the image has no such table
// (not a 64-bit little-endian ELF, no ".nv.info.<entry>" section, no parameter records, or
// records it cannot read): then there is nothing to check against and the driver judges the
// image when it loads it.
bool cubin_param_sizes(const uint8_t* image, uint64_t size, const std::string& entry,
                       std::vector<uint32_t>* sizes);

}  // namespace aotpack
