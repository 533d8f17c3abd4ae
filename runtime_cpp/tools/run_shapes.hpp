// run_shapes.hpp — aotpack-run's input shapes for bundles whose dims vary at run time (v2):
// `--shape NAME=AxB[,NAME2=C...]` parsing, completing a partial shape set from the symbols'
// example (else max) values, and the `ids=4x128` labels of the bench lines.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aotpack/aotpack.h"

namespace aotpack_run {

using Dims = std::vector<int64_t>;

// One --shape value: the dims of some inputs, by name, in the order given.
using ShapeArg = std::vector<std::pair<std::string, Dims>>;

// Parses "ids=4x128,mask=4x128" ("name=" is a rank-0 input). Returns "" or what is wrong.
std::string parse_shape_arg(const std::string& text, ShapeArg* out);

// The shape of every input: the dims `arg` gives for the inputs it names; for the others,
// their dims evaluated with each symbol set from the named inputs (a dim that is exactly a
// symbol sets it), else its example value, else its max. Throws aotpack::Error
// (INVALID_ARGUMENT) for an input name the model lacks. The runtime checks the result.
std::vector<Dims> resolve_input_shapes(aotpack_model* m,
                                       const std::vector<aotpack_tensor_info>& ins,
                                       const ShapeArg& arg);

// "x=4x64,aux=4x8": the inputs with a dim that varies ("" when there is none).
std::string shape_label(const std::vector<aotpack_tensor_info>& ins,
                        const std::vector<Dims>& shapes);

// Copies of `infos` with the given concrete dims and their byte sizes.
std::vector<aotpack_tensor_info> with_shapes(std::vector<aotpack_tensor_info> infos,
                                             const std::vector<Dims>& shapes);

// The C structs of `shapes`.
std::vector<aotpack_shape> c_shapes(const std::vector<Dims>& shapes);

}  // namespace aotpack_run
