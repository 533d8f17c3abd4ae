// test_main.hpp — a minimal test registry (no third-party framework): TEST(name) registers
// a case; the binary runs one case by name (ctest runs each separately) or all of them.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

namespace aotpack_test {

std::map<std::string, std::function<void()>>& registry();

struct Register {
  Register(const char* name, std::function<void()> fn) { registry()[name] = std::move(fn); }
};

[[noreturn]] inline void test_failed(const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, msg.c_str());
  std::exit(1);
}

inline bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace aotpack_test

#define TEST(name)                                                                       \
  static void test_##name();                                                             \
  static aotpack_test::Register register_##name(#name, test_##name);                     \
  static void test_##name()

#define EXPECT(cond)                                                                    \
  do {                                                                                  \
    if (!(cond)) aotpack_test::test_failed(__FILE__, __LINE__, "expected: " #cond);     \
  } while (0)
