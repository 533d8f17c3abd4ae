// test_main.cpp — runs the registered test cases: `prog NAME` runs one, `prog` runs all,
// `prog --list` prints the names.
#include "test_main.hpp"

#include <cstring>

#include "bundle_builder.hpp"
#include "safetensors.hpp"

namespace {
// Inputs of the dynamic test bundle at B = 5 (x f32[5, 64], aux f32[5, 10]) for
// `aotpack-run --inputs`.
void write_dynamic_inputs(const std::string& dir) {
  std::vector<float> x(5 * 64), aux(5 * 10, 0.5f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7);
  aotpack::write_safetensors(dir + "/inputs.safetensors",
                             {{"x", "F32", {5, 64}, x.data(), x.size() * 4},
                              {"aux", "F32", {5, 10}, aux.data(), aux.size() * 4}},
                             {}, 64);
}
}  // namespace

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
  bool dynamic = argc > 2 && std::strcmp(argv[1], "--write-dynamic-bundle") == 0;
  bool gen = argc > 2 && std::strcmp(argv[1], "--write-generation-bundle") == 0;
  if (dynamic || gen || (argc > 2 && std::strcmp(argv[1], "--write-bundle") == 0)) {
    // Fixture for the aotpack-run tests: a valid bundle (v1, the v2 one with dims that
    // vary at run time, or the generation one) in the given (created) directory.
    std::string cmd = std::string("mkdir -p '") + argv[2] + "'";
    if (std::system(cmd.c_str()) != 0) return 1;
    aotpack_test::TestBundle b = dynamic ? aotpack_test::TestBundle::dynamic()
                                 : gen   ? aotpack_test::TestBundle::generation()
                                         : aotpack_test::TestBundle();
    std::printf("%s\n", b.write(argv[2]).c_str());
    if (dynamic) write_dynamic_inputs(argv[2]);
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
