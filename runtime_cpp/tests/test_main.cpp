// test_main.cpp — runs the registered test cases: `prog NAME` runs one, `prog` runs all,
// `prog --list` prints the names.
#include "test_main.hpp"

#include <cstring>

#include "bundle_builder.hpp"

namespace aotpack_test {
std::map<std::string, std::function<void()>>& registry() {
  static std::map<std::string, std::function<void()>> r;
  return r;
}
}  // namespace aotpack_test

int main(int argc, char** argv) {
  auto& r = aotpack_test::registry();
  if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {
    for (auto& kv : r) std::printf("%s\n", kv.first.c_str());
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[1], "--write-bundle") == 0) {
    // Fixture for the aotpack-run tests: a valid bundle in the given (created) directory.
    std::string cmd = std::string("mkdir -p '") + argv[2] + "'";
    if (std::system(cmd.c_str()) != 0) return 1;
    std::printf("%s\n", aotpack_test::TestBundle().write(argv[2]).c_str());
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[1], "--write-tune-jobs") == 0) {
    aotpack_test::write_tune_jobs(argv[2]);  // fixture of the aotpack-run --tune tests
    return 0;
  }
  int ran = 0;
  for (auto& kv : r) {
    if (argc > 1 && kv.first != argv[1]) continue;
    std::printf("[ RUN  ] %s\n", kv.first.c_str());
    kv.second();
    std::printf("[  OK  ] %s\n", kv.first.c_str());
    ++ran;
  }
  if (ran == 0) {
    std::fprintf(stderr, "no test named '%s'\n", argc > 1 ? argv[1] : "");
    return 1;
  }
  return 0;
}
