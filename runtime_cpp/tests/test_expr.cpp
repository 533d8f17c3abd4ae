// test_expr.cpp — the v2 expression language (docs/manifest.md "Expressions"): precedence,
// floor division/modulo, min/max, overflow, syntax errors, unknown symbols.
#include <cstdint>
#include <string>
#include <vector>

#include "error.hpp"
#include "expr.hpp"
#include "test_main.hpp"

using aotpack::Expr;

using aotpack_test::has;

namespace {

const std::vector<std::string> kNames = {"B", "S", "n_2"};

// Value of `text` at B=2, S=17, n_2=-7 (a negative symbol value exercises the flooring).
int64_t value(const std::string& text, std::vector<int64_t> syms = {2, 17, -7}) {
  int64_t v = 0;
  const char* why = Expr::compile(text, kNames, "test").eval(syms.data(), &v);
  if (why) aotpack_test::test_failed(__FILE__, __LINE__, "'" + text + "': " + why);
  return v;
}

// The eval error of `text` ("" when it has a value).
std::string eval_error(const std::string& text, std::vector<int64_t> syms = {2, 17, -7}) {
  int64_t v = 0;
  const char* why = Expr::compile(text, kNames, "test").eval(syms.data(), &v);
  return why ? why : "";
}

// The compile error of `text` ("" when it compiles).
std::string compile_error(const std::string& text) {
  try {
    Expr::compile(text, kNames, "steps[1].grid[0]");
  } catch (const aotpack::Error& e) {
    EXPECT(e.code() == AOTPACK_CORRUPT_BUNDLE);
    std::printf("  '%s' -> %s\n", text.c_str(), e.what());
    return e.what();
  }
  return "";
}

}  // namespace

TEST(expr_precedence) {
  EXPECT(value("1 + 2 * 3") == 7);
  EXPECT(value("(1 + 2) * 3") == 9);
  EXPECT(value("10 - 4 - 3") == 3);  // left associative
  EXPECT(value("100 / 10 / 5") == 2);
  EXPECT(value("2 * 3 % 4") == 2);  // (2*3) % 4
  EXPECT(value("-B * S") == -34);
  EXPECT(value("- -B") == 2);
  EXPECT(value("4096*B*S") == 4096 * 2 * 17);
  EXPECT(value("S - 1") == 16);
  EXPECT(value("  B+S  ") == 19);
  EXPECT(value("n_2") == -7);
  EXPECT(value("007") == 7);
}

TEST(expr_floor_div_mod) {
  EXPECT(value("(-7)/2") == -4);
  EXPECT(value("(-7)%2") == 1);
  EXPECT(value("-7/2") == -4);  // unary minus binds tighter than /
  EXPECT(value("7/2") == 3 && value("7%2") == 1);
  EXPECT(value("n_2/2") == -4 && value("n_2%2") == 1);
  EXPECT(value("n_2/7") == -1 && value("n_2%7") == 0);
  EXPECT(value("(127 + B*S)/128") == 1);
  EXPECT(aotpack::floor_div(-1, 3) == -1 && aotpack::floor_mod(-1, 3) == 2);
  EXPECT(aotpack::floor_div(INT64_MIN, 1) == INT64_MIN);
  EXPECT(eval_error("S/0") == "divides by a number <= 0");
  EXPECT(eval_error("S%(B-2)") == "divides by a number <= 0");
  EXPECT(eval_error("S/n_2") == "divides by a number <= 0");  // divisor must be positive
}

TEST(expr_min_max) {
  EXPECT(value("min(132, 2*((127 + B*S)/128))") == 2);
  EXPECT(value("min(132, 2*((127 + B*S)/128))", {64, 4096, 0}) == 132);
  EXPECT(value("max(B, S)") == 17 && value("max(min(B, S), 3)") == 3);
  EXPECT(value("min( B , max(S,1) )") == 2);
}

TEST(expr_overflow) {
  EXPECT(value("9223372036854775807") == INT64_MAX);
  EXPECT(eval_error("9223372036854775807 + B") == "overflows int64");
  EXPECT(eval_error("0 - 9223372036854775807 - B") == "overflows int64");
  EXPECT(eval_error("S*S*S*S*S*S*S*S*S*S*S*S*S*S*S*S*S") == "overflows int64");
  EXPECT(eval_error("-(0 - 9223372036854775807 - 1)") == "overflows int64");
  EXPECT(eval_error("4096*B*S", {INT64_MAX / 4096, 2, 0}) == "overflows int64");
  EXPECT(has(compile_error("9223372036854775808"), "does not fit in int64"));
}

TEST(expr_syntax_errors) {
  EXPECT(has(compile_error(""), "got the end"));
  EXPECT(has(compile_error("B +"), "got the end"));
  EXPECT(has(compile_error("(B"), "expected ')'"));
  EXPECT(has(compile_error("B S"), "unexpected 'S'"));
  EXPECT(has(compile_error("B ** 2"), "got '*'"));
  EXPECT(has(compile_error("min(B)"), "expected ','"));
  EXPECT(has(compile_error("min B"), "expected '('"));
  EXPECT(has(compile_error("B\t+ 1"), "unexpected"));  // only spaces separate tokens
  EXPECT(has(compile_error("2.5*B"), "unexpected '.'"));
  std::string msg = compile_error("B * (S + ");
  EXPECT(has(msg, "manifest: steps[1].grid[0]: expression 'B * (S + '"));
  EXPECT(has(msg, "at position 9"));
  std::string deep(200, '(');
  EXPECT(has(compile_error(deep + "B" + std::string(200, ')')), "nested more than"));
  std::string wide = "B";
  for (int i = 0; i < 70; ++i) wide = "B+(" + wide + ")";
  EXPECT(has(compile_error(wide), "nested more than"));
  std::string many = "B";
  for (int i = 0; i < 100; ++i) many += "+B";
  EXPECT(compile_error(many).empty());  // long but shallow: fine
  EXPECT(value(many) == 202);
}

TEST(expr_unknown_symbol) {
  std::string msg = compile_error("B * T");
  EXPECT(has(msg, "unknown symbol 'T'") && has(msg, "B, S, n_2"));
  EXPECT(has(compile_error("max + 1"), "expected '('"));
  EXPECT(has(compile_error("b"), "unknown symbol 'b'"));  // names are case-sensitive
}

// k*S + c with k >= 1 (a derived input dim binds S from it); anything else is not affine.
TEST(expr_affine_symbol) {
  struct Case { const char* text; int sym; int64_t k, c; };
  for (Case c : {Case{"16*S", 1, 16, 0}, Case{"2*S + 1", 1, 2, 1}, Case{"S", 1, 1, 0},
                 Case{"(S + 3)*4 - 2", 1, 4, 10}, Case{"S - S + B", 0, 1, 0},
                 Case{"S + 4/2", 1, 1, 2}, Case{"-(-S) * 3", 1, 3, 0}, Case{"S/2", -1, 0, 0},
                 Case{"S*S", -1, 0, 0}, Case{"B*S", -1, 0, 0}, Case{"40 - S", -1, 0, 0},
                 Case{"3", -1, 0, 0}, Case{"0*S + 5", -1, 0, 0}, Case{"min(S, 4)", -1, 0, 0},
                 Case{"S + B", -1, 0, 0}, Case{"S*4611686018427387904*4", -1, 0, 0}}) {
    int64_t k = 0, off = 0;
    int sym = Expr::compile(c.text, kNames, "t").affine_symbol(&k, &off);
    EXPECT(sym == c.sym);
    if (sym >= 0) EXPECT(k == c.k && off == c.c);
  }
}

TEST(expr_single_symbol_and_uses) {
  EXPECT(Expr::compile("S", kNames, "t").single_symbol() == 1);
  EXPECT(Expr::compile(" ( S ) ", kNames, "t").single_symbol() == 1);
  EXPECT(Expr::compile("S + 0", kNames, "t").single_symbol() == -1);
  EXPECT(Expr::compile("2", kNames, "t").single_symbol() == -1);
  EXPECT(Expr::compile("S*B + S", kNames, "t").symbols_used() == std::vector<int>({0, 1}));
  EXPECT(Expr::compile("7", kNames, "t").symbols_used().empty());
  EXPECT(Expr::compile("S*B", kNames, "t").text() == "S*B");
}
