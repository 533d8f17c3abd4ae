// run_shapes.cpp — see run_shapes.hpp.
#include "run_shapes.hpp"

#include <cstdlib>

#include "c_api_util.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "expr.hpp"

namespace aotpack_run {

using aotpack::cat;

namespace {

// "4x128" → {4, 128}; "" → {} (rank 0).
bool parse_dims(const std::string& s, Dims* out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t x = s.find('x', i);
    std::string part = s.substr(i, x == std::string::npos ? std::string::npos : x - i);
    char* end = nullptr;
    long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end || v < 0 || part[0] == '-' || part[0] == '+') return false;
    out->push_back(v);
    if (x == std::string::npos) break;
    i = x + 1;
    if (i == s.size()) return false;  // trailing 'x'
  }
  return true;
}

// Expression text of input/output dim k, or nullptr when static.
const char* dim_expr(aotpack_model* m, size_t index, int32_t k, bool input) {
  const char* expr = nullptr;
  check_status(input ? aotpack_model_input_dim(m, index, k, &expr, nullptr, nullptr)
                     : aotpack_model_output_dim(m, index, k, &expr, nullptr, nullptr));
  return expr;
}

}  // namespace

std::string parse_shape_arg(const std::string& text, ShapeArg* out) {
  size_t i = 0;
  while (i <= text.size()) {
    size_t comma = text.find(',', i);
    std::string item = text.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    size_t eq = item.find('=');
    Dims dims;
    if (eq == std::string::npos || eq == 0 || !parse_dims(item.substr(eq + 1), &dims))
      return cat("--shape needs NAME=AxBxC[,NAME2=DxE...] (non-negative dims), got '", item,
                 "' in '", text, "'");
    out->emplace_back(item.substr(0, eq), dims);
    if (comma == std::string::npos) break;
    i = comma + 1;
  }
  return "";
}

std::vector<Dims> resolve_input_shapes(aotpack_model* m,
                                       const std::vector<aotpack_tensor_info>& ins,
                                       const ShapeArg& arg) {
  std::vector<std::string> names;
  std::vector<int64_t> syms;
  for (size_t s = 0; s < aotpack_model_num_symbols(m); ++s) {
    aotpack_symbol_info info;
    check_status(aotpack_model_symbol_info(m, s, &info));
    names.push_back(info.name);
    syms.push_back(info.example >= 0 ? info.example : info.max);
  }
  std::vector<Dims> shapes(ins.size());
  std::vector<bool> given(ins.size(), false);
  for (const auto& [name, dims] : arg) {
    size_t i = 0;
    while (i < ins.size() && name != ins[i].name) ++i;
    if (i == ins.size()) {
      std::string known;
      for (const auto& t : ins) known += cat(known.empty() ? "" : ", ", t.name);
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "--shape: the model has no input '", name,
                    "' (its inputs: ", known, ")");
    }
    shapes[i] = dims;
    given[i] = true;
    for (int32_t k = 0; k < ins[i].rank && size_t(k) < dims.size(); ++k) {
      const char* e = dim_expr(m, i, k, true);
      int s = e ? aotpack::Expr::compile(e, names, "dim").single_symbol() : -1;
      if (s >= 0) syms[size_t(s)] = dims[size_t(k)];
    }
  }
  for (size_t i = 0; i < ins.size(); ++i) {
    if (given[i]) continue;
    for (int32_t k = 0; k < ins[i].rank; ++k) {
      const char* e = dim_expr(m, i, k, true);
      int64_t v = ins[i].dims[k];
      if (e) {
        if (const char* why = aotpack::Expr::compile(e, names, "dim").eval(syms.data(), &v))
          aotpack::fail(AOTPACK_INVALID_ARGUMENT, "input '", ins[i].name, "' dim ", k, ": '", e,
                        "' ", why, " for these symbol values");
      }
      shapes[i].push_back(v);
    }
  }
  return shapes;
}

std::string shape_label(const std::vector<aotpack_tensor_info>& ins,
                        const std::vector<Dims>& shapes) {
  std::string out;
  for (size_t i = 0; i < ins.size(); ++i) {
    bool dynamic = false;
    for (int32_t k = 0; k < ins[i].rank; ++k) dynamic = dynamic || ins[i].dims[k] < 0;
    if (!dynamic) continue;
    out += cat(out.empty() ? "" : ",", ins[i].name, "=");
    for (size_t k = 0; k < shapes[i].size(); ++k) out += cat(k ? "x" : "", shapes[i][k]);
  }
  return out;
}

std::vector<aotpack_tensor_info> with_shapes(std::vector<aotpack_tensor_info> infos,
                                             const std::vector<Dims>& shapes) {
  for (size_t i = 0; i < infos.size(); ++i) {
    aotpack_tensor_info& t = infos[i];
    t.rank = int32_t(shapes[i].size());
    uint64_t n = aotpack::dtype_size(t.dtype);
    for (size_t k = 0; k < AOTPACK_MAX_RANK; ++k) {
      t.dims[k] = k < shapes[i].size() ? shapes[i][k] : 0;
      if (k < shapes[i].size()) n *= uint64_t(shapes[i][k]);
    }
    t.nbytes = n;
  }
  return infos;
}

std::vector<aotpack_shape> c_shapes(const std::vector<Dims>& shapes) {
  std::vector<aotpack_shape> out(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    out[i] = aotpack_shape{};
    out[i].rank = int32_t(shapes[i].size());
    for (size_t k = 0; k < shapes[i].size() && k < AOTPACK_MAX_RANK; ++k)
      out[i].dims[k] = shapes[i][k];
  }
  return out;
}

}  // namespace aotpack_run
