// test_bundle_v2.cpp — bundle format v2 (dims that vary at run time) through
// aotpack_model_check_file, no GPU: symbols, where expressions are allowed, binding, and the
// per-shape checks the load runs at the all-min and all-max shapes.
#include <cstring>
#include <string>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

// Checks that validating the bundle gives `code` and a message containing every needle.
void expect_check(const TestBundle& b, aotpack_code code,
                  std::initializer_list<std::string> needles) {
  expect_check_file(b.write(make_temp_dir("v2")), code, needles);
}

Value& symbol(TestBundle& b, size_t i = 0) { return at(at(b.manifest, "symbols"), i); }
Value& step(TestBundle& b, size_t i) { return at(at(b.manifest, "steps"), i); }
Value& arg(TestBundle& b, size_t s, size_t i) { return at(at(step(b, s), "args"), i); }
Value& input_dim(TestBundle& b, size_t i, size_t k) {
  return at(at(at(at(b.manifest, "inputs"), i), "shape"), k);
}

// A symbol object {"name", "min", "max"}.
Value sym(const std::string& name, int64_t lo, int64_t hi) {
  Value v;
  at(v, "name") = jstr(name);
  at(v, "min") = jint(lo);
  at(v, "max") = jint(hi);
  return v;
}

}  // namespace

TEST(v2_valid_bundle) { expect_check(TestBundle::dynamic(), AOTPACK_OK, {"OK"}); }

TEST(v2_bad_symbols) {
  for (const char* name : {"2B", "min", "max", "B-1", ""}) {
    TestBundle b = TestBundle::dynamic();
    at(symbol(b), "name") = jstr(name);
    expect_check(b, AOTPACK_CORRUPT_BUNDLE, {"symbols[0].name", "not a valid symbol name"});
  }
  TestBundle dup = TestBundle::dynamic();
  at(dup.manifest, "symbols").items.push_back(sym("B", 1, 2));
  expect_check(dup, AOTPACK_CORRUPT_BUNDLE, {"symbols[1].name", "duplicate symbol 'B'"});
  TestBundle range = TestBundle::dynamic();
  at(symbol(range), "min") = jint(10);
  at(symbol(range), "max") = jint(9);
  expect_check(range, AOTPACK_CORRUPT_BUNDLE, {"symbols[0].max", "outside [10, 2147483647]"});
  TestBundle big = TestBundle::dynamic();
  at(symbol(big), "max") = jint(int64_t(1) << 31);
  expect_check(big, AOTPACK_CORRUPT_BUNDLE, {"symbols[0].max"});
  TestBundle neg = TestBundle::dynamic();
  at(symbol(neg), "min") = jint(-1);
  expect_check(neg, AOTPACK_CORRUPT_BUNDLE, {"symbols[0].min"});
  TestBundle ex = TestBundle::dynamic();
  at(symbol(ex), "example") = jint(65);
  expect_check(ex, AOTPACK_CORRUPT_BUNDLE, {"symbols[0].example", "outside [1, 64]"});
  TestBundle none = TestBundle::dynamic();
  auto& f = none.manifest.fields;
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i].first == "symbols") f.erase(f.begin() + long(i));
  expect_check(none, AOTPACK_CORRUPT_BUNDLE, {"missing field 'symbols'"});
}

TEST(v2_expression_where_not_allowed) {
  TestBundle block = TestBundle::dynamic();
  at(at(at(at(block.manifest, "kernels"), 0), "block"), 0) = jstr("B");
  expect_check(block, AOTPACK_CORRUPT_BUNDLE,
               {"kernels[0].block[0]", "expected an integer, got the string 'B'"});
  TestBundle arena = TestBundle::dynamic();
  at(arena.manifest, "arena_bytes") = jstr("4096*B");
  expect_check(arena, AOTPACK_CORRUPT_BUNDLE, {"arena_bytes", "expressions are allowed only"});
  TestBundle box = TestBundle::dynamic();
  at(at(arg(box, 0, 3), "box"), 0) = jstr("B");
  expect_check(box, AOTPACK_CORRUPT_BUNDLE, {"steps[0].args[3].box[0]"});
  TestBundle weight = TestBundle::dynamic();
  at(at(at(at(weight.manifest, "weights"), 0), "shape"), 0) = jstr("B");
  expect_check(weight, AOTPACK_CORRUPT_BUNDLE, {"weights[0].shape[0]"});
  TestBundle when = TestBundle::dynamic();
  at(at(at(step(when, 0), "when"), 0), "max") = jstr("B");
  expect_check(when, AOTPACK_CORRUPT_BUNDLE, {"steps[0].when[0].max"});
}

TEST(v2_expression_errors_name_the_field) {
  TestBundle unknown = TestBundle::dynamic();
  input_dim(unknown, 1, 1) = jstr("2*T");
  expect_check(unknown, AOTPACK_CORRUPT_BUNDLE,
               {"manifest: inputs[1].shape[1]: expression '2*T'", "unknown symbol 'T'"});
  TestBundle syntax = TestBundle::dynamic();
  at(step(syntax, 1), "grid").items[0] = jstr("(B + 7/8");
  expect_check(syntax, AOTPACK_CORRUPT_BUNDLE, {"steps[1].grid[0]", "expected ')'"});
  TestBundle when = TestBundle::dynamic();
  at(at(at(step(when, 0), "when"), 0), "expr") = jstr("B +");
  expect_check(when, AOTPACK_CORRUPT_BUNDLE, {"steps[0].when[0].expr"});
  TestBundle folded = TestBundle::dynamic();  // a constant expression is checked at once
  at(arg(folded, 0, 4), "value") = jstr("65536*65536");
  expect_check(folded, AOTPACK_CORRUPT_BUNDLE, {"steps[0].args[4].value", "outside"});
  // an expression is compiled once per text, but every use keeps its own range: -5 is a
  // fine i32 value and no grid size
  TestBundle reused = TestBundle::dynamic();
  at(arg(reused, 0, 4), "value") = jstr("0-5");
  expect_check(reused, AOTPACK_OK, {"OK"});
  at(step(reused, 1), "grid").items[0] = jstr("0-5");
  expect_check(reused, AOTPACK_CORRUPT_BUNDLE, {"steps[1].grid[0] ('0-5')", "outside"});
}

TEST(v2_when_needs_min_and_max) {
  TestBundle b = TestBundle::dynamic();
  Value& cond = at(at(step(b, 0), "when"), 0);
  cond.fields.pop_back();  // drop "max"
  expect_check(b, AOTPACK_CORRUPT_BUNDLE, {"steps[0].when[0]", "missing field 'max'"});
  TestBundle inv = TestBundle::dynamic();
  at(at(at(step(inv, 0), "when"), 0), "min") = jint(9);
  at(at(at(step(inv, 0), "when"), 0), "max") = jint(8);
  expect_check(inv, AOTPACK_CORRUPT_BUNDLE, {"steps[0].when[0].max"});
}

TEST(v2_unbindable_symbol) {
  TestBundle b = TestBundle::dynamic();
  at(b.manifest, "symbols").items.push_back(sym("T", 1, 8));
  input_dim(b, 1, 1) = jstr("T/2");  // T appears, but never as a whole dim nor as k*T + c
  expect_check(b, AOTPACK_CORRUPT_BUNDLE, {"symbols[1]", "symbol 'T' is not the whole of any "
                                           "input dim"});
  TestBundle out = TestBundle::dynamic();  // an output dim does not bind
  at(out.manifest, "symbols").items.push_back(sym("T", 1, 8));
  at(at(at(at(out.manifest, "outputs"), 0), "shape"), 1) = jstr("T");
  expect_check(out, AOTPACK_CORRUPT_BUNDLE, {"symbol 'T'"});
}

TEST(v1_keeps_v1_rules) {
  TestBundle b;  // a v1 bundle with a `when` (a v2 feature) is refused, not half-run
  Value cond;
  at(cond, "expr") = jint(1);
  at(cond, "min") = jint(0);
  at(cond, "max") = jint(1);
  at(at(at(b.manifest, "steps"), 0), "when").type = Type::Array;
  at(at(at(b.manifest, "steps"), 0), "when").items.push_back(cond);
  expect_check(b, AOTPACK_CORRUPT_BUNDLE, {"steps[0].when", "need bundle format v2"});
  TestBundle g;  // grid 0 stays an error in v1
  at(at(at(g.manifest, "steps"), 0), "grid").items[0] = jint(0);
  expect_check(g, AOTPACK_CORRUPT_BUNDLE, {"steps[0].grid[0]"});
  TestBundle s;
  at(at(at(at(s.manifest, "steps"), 0), "args"), 5).fields[1].second = jstr("n");
  expect_check(s, AOTPACK_UNSUPPORTED_VERSION, {"steps[0].args[5].value", "symbolic"});
}

// The tensor map of the big group reads [B*B, 64] rows of x (B rows): inside x at every
// shape where B*B <= B... i.e. only B = 1, which the big group never sees. Refused at load
// by the all-max check, naming step, slot and shape.
TEST(v2_extent_escapes_only_at_max_shape) {
  TestBundle b = TestBundle::dynamic();
  at(at(arg(b, 1, 3), "dims"), 0) = jstr("B*B");
  expect_check(b, AOTPACK_CORRUPT_BUNDLE,
               {"manifest: at shape B=64: steps[1] (kernel 'dyn_big') args[3]",
                "tensormap covers bytes [0, 1048576) but buffer 0 (input) has 16384 bytes",
                "rebuild it"});
  TestBundle ok = TestBundle::dynamic();  // B rows, written the long way: fine
  at(at(arg(ok, 0, 3), "dims"), 0) = jstr("min(B*B, B)");
  expect_check(ok, AOTPACK_OK, {"OK"});
}

TEST(v2_per_shape_checks_at_min_and_max) {
  TestBundle fdm = TestBundle::dynamic();  // fastdivmod divisor B - 1 is 0 at B = 1
  at(arg(fdm, 0, 5), "kind") = jstr("fastdivmod");
  at(arg(fdm, 0, 5), "value") = jstr("B - 1");
  expect_check(fdm, AOTPACK_CORRUPT_BUNDLE,
               {"at shape B=1: steps[0].args[5].value: expression 'B - 1' = 0 is outside "
                "[1, 2147483647]"});
  TestBundle i32 = TestBundle::dynamic();  // fine at B = 1, past int32 at B = 64
  at(arg(i32, 1, 4), "value") = jstr("B*100000000");
  expect_check(i32, AOTPACK_CORRUPT_BUNDLE,
               {"at shape B=64: steps[1].args[4].value", "6400000000 is outside"});
  TestBundle ovf = TestBundle::dynamic();
  at(arg(ovf, 1, 4), "value") = jstr("B*9223372036854775807");
  expect_check(ovf, AOTPACK_CORRUPT_BUNDLE, {"at shape B=64", "overflows int64"});
  TestBundle gy = TestBundle::dynamic();
  at(step(gy, 1), "grid").items[1] = jstr("B*2000");
  expect_check(gy, AOTPACK_CORRUPT_BUNDLE,
               {"at shape B=64: steps[1] (kernel 'dyn_big')", "grid y and z must be <= 65535"});
  TestBundle cl = TestBundle::dynamic();
  Value cluster;
  cluster.type = Type::Array;
  for (int v : {2, 1, 1}) cluster.items.push_back(jint(v));
  at(at(at(cl.manifest, "kernels"), 0), "cluster") = cluster;
  expect_check(cl, AOTPACK_CORRUPT_BUNDLE,
               {"at shape B=1: steps[0]", "grid[0] = 1 is not a multiple of cluster[0] = 2"});
  TestBundle neg = TestBundle::dynamic();  // an input dim below 0
  input_dim(neg, 1, 1) = jstr("2*B - 3");
  expect_check(neg, AOTPACK_CORRUPT_BUNDLE,
               {"at shape B=1: inputs[1].shape[1]: expression '2*B - 3' = -1 is outside"});
  TestBundle ptr = TestBundle::dynamic();
  at(arg(ptr, 0, 2), "offset") = jstr("256*B + 1");
  expect_check(ptr, AOTPACK_CORRUPT_BUNDLE,
               {"at shape B=1: steps[0] (kernel 'dyn_small') args[2]", "ptr offset 257"});
}

TEST(v2_empty_grid_skips_the_step) {
  TestBundle b = TestBundle::dynamic();
  // Without its `when`, step 1's grid is 0 up to B = 8, where its tensor map (8 rows from
  // B = 1 on) would leave x: skipped there, so nothing is checked or launched.
  at(step(b, 1), "grid").items[0] = jstr("max(B - 8, 0)");
  auto& f = step(b, 1).fields;
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i].first == "when") f.erase(f.begin() + long(i));
  at(at(arg(b, 1, 3), "dims"), 0) = jstr("B + 8 - min(B, 8)");
  expect_check(b, AOTPACK_OK, {"OK"});
  at(step(b, 1), "grid").items[0] = jstr("max(B - 8, 1)");  // now it runs at B = 1: refused
  expect_check(b, AOTPACK_CORRUPT_BUNDLE, {"at shape B=1: steps[1] (kernel 'dyn_big') args[3]"});
  TestBundle c = TestBundle::dynamic();
  at(step(c, 0), "grid").items[2] = jint(0);  // a constant 0: never runs, still valid v2
  expect_check(c, AOTPACK_OK, {"OK"});
}

TEST(v2_symbols_without_dims) {
  TestBundle b = TestBundle::dynamic();  // a v2 bundle without symbols is a static bundle
  at(b.manifest, "symbols").items.clear();
  for (size_t i = 0; i < 2; ++i) {
    input_dim(b, i, 0) = jint(4);
  }
  input_dim(b, 1, 1) = jint(8);
  at(at(at(at(b.manifest, "outputs"), 0), "shape"), 0) = jint(4);
  for (size_t s = 0; s < 2; ++s) {
    at(step(b, s), "grid").items[0] = jint(1);
    at(at(arg(b, s, 3), "dims"), 0) = jint(4);
    at(arg(b, s, 4), "value") = jint(256);
    at(at(at(step(b, s), "when"), 0), "expr") = jstr("4");
  }
  expect_check(b, AOTPACK_OK, {"OK"});
  input_dim(b, 0, 0) = jstr("B");
  expect_check(b, AOTPACK_CORRUPT_BUNDLE, {"unknown symbol 'B'", "none"});
}

// Random expressions in every field that may hold one, and random bytes in the header: every
// result is a status, never a crash (run under AOTPACK_SANITIZE for out-of-bounds reads,
// overflow and shifts).
TEST(v2_expression_fuzz) {
  uint64_t rng = 0x2545F4914F6CDD1Dull;
  auto next = [&] { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; };
  const std::string alphabet = "BB9901+-*/%(),  minax";
  std::string dir = make_temp_dir("v2fuzz");
  int ok = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    TestBundle b = TestBundle::dynamic();
    std::string e;
    for (size_t n = next() % 24; n > 0; --n) e += alphabet[next() % alphabet.size()];
    if (iter % 5 == 0) e = "min(B, 64)*" + std::to_string(int64_t(next() >> 2));
    size_t s = next() % 2;
    switch (next() % 7) {
      case 0: input_dim(b, next() % 2, next() % 2) = jstr(e); break;
      case 1: at(step(b, s), "grid").items[next() % 3] = jstr(e); break;
      case 2: at(arg(b, s, 4), "value") = jstr(e); break;
      case 3: at(arg(b, s, 3 - 3 * (next() % 2)), "offset") = jstr(e); break;
      case 4: at(at(arg(b, s, 3), next() % 2 ? "dims" : "strides"), next() % 2) = jstr(e); break;
      case 5: at(at(at(step(b, s), "when"), 0), "expr") = jstr(e); break;
      default: at(at(at(b.manifest, "outputs"), 0), "shape").items[next() % 2] = jstr(e); break;
    }
    std::string path = b.write(dir);
    aotpack_status* st = aotpack_model_check_file(path.c_str(), nullptr);
    if (!st) ++ok;
    EXPECT(st == nullptr || std::strlen(aotpack_status_message(st)) > 0);
    aotpack_status_free(st);
  }
  std::printf("  %d of 1500 bundles with a random expression still valid\n", ok);
}
