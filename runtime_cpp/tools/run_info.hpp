// run_info.hpp — `aotpack-run BUNDLE --info` (host only, no driver).
#pragma once

#include <string>

namespace aotpack_run {

// Prints signature, symbols, weights, arena, kernels and steps of the bundle after verifying
// it (checksums included). Throws aotpack::Error when the bundle is invalid.
void print_info(const std::string& bundle, const std::string& weights, int verify);

}  // namespace aotpack_run
