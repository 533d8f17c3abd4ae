// pointers.hpp — is an address a caller passes (input, output, workspace) memory the model's
// kernels can read and write? Asked of the driver (cuPointerGetAttribute) when a session first
// sees a pointer set, never on the hot path: a host address launched on faults the GPU with an
// illegal memory access that poisons the whole CUDA context.
#pragma once

#include <cstdint>
#include <string>

namespace aotpack {

// Checks that [address, address + nbytes) lies inside one allocation the driver knows as
// device memory of device `ordinal`, or as managed memory (any device). `what` names the
// tensor in messages ("input 0 ('x')"). Throws Error(INVALID_ARGUMENT) saying what the memory
// is instead and what to pass; Error(CUDA_ERROR) when the driver itself fails.
void check_device_range(uint64_t address, uint64_t nbytes, int ordinal, const std::string& what);

}  // namespace aotpack
