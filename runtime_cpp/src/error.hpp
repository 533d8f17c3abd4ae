// error.hpp — internal error type of the runtime.
//
// Inside the library, failures are C++ exceptions carrying an aotpack_code and a message
// (short code paths, no status plumbing). They never cross the C API: c_api.cpp converts
// every exception into an aotpack_status at the boundary.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "aotpack/aotpack.h"

namespace aotpack {

// An error with a public status code. what() returns the message.
class Error : public std::runtime_error {
 public:
  Error(aotpack_code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  aotpack_code code() const { return code_; }

 private:
  aotpack_code code_;
};

namespace detail {
// Appends one value as text. Deliberately not iostreams: libaotpack.so is loaded into host
// processes (Python with torch) whose C++ locale state we do not control, and an
// ostringstream crashed there (seen on the H200 machine, 2026-11-30); plain appends cannot.
template <typename T>
void append(std::string& out, const T& v) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (std::is_same_v<D, char>) {
    out += v;
  } else if constexpr (std::is_enum_v<D>) {
    out += std::to_string(static_cast<long long>(v));
  } else if constexpr (std::is_integral_v<D>) {
    out += std::to_string(v);
  } else if constexpr (std::is_floating_point_v<D>) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", double(v));
    out += buf;
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    std::string_view s(v);
    out.append(s.data(), s.size());
  } else if constexpr (std::is_pointer_v<D>) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(v));
    out += buf;
  } else {
    static_assert(sizeof(T) == 0, "cat(): unsupported argument type");
  }
}
}  // namespace detail

// Concatenates values (strings, numbers, enums) into a string: cat("step ", 3, ": ", msg).
template <typename... Args>
std::string cat(Args&&... args) {
  std::string out;
  (detail::append(out, args), ...);
  return out;
}

// Throws Error(code, cat(args...)).
template <typename... Args>
[[noreturn]] void fail(aotpack_code code, Args&&... args) {
  throw Error(code, cat(std::forward<Args>(args)...));
}

}  // namespace aotpack
