// expr.hpp — integer expressions of bundle format v2 (docs/manifest.md, "Expressions"):
// `+ - * / % min max ( )` over symbols and int64 constants, `/` and `%` flooring.
//
// An expression is parsed once, at load, into a short stack program over symbol indices and
// constants; evaluating it for a shape neither allocates nor throws, and reports int64
// overflow and divisors <= 0 as errors (never wraps, never traps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aotpack {

// One integer field of the manifest: a constant, or (v2) an expression, by index into the
// manifest's table of compiled expressions (Manifest::exprs). Kept small: most fields of a
// bundle are constants, and v1 bundles hold nothing else.
struct IntExpr {
  int64_t value = 0;  // the constant (when is_const())
  int32_t expr = -1;  // index into Manifest::exprs; -1: a constant
  bool is_const() const { return expr < 0; }
  static IntExpr constant(int64_t v) {
    IntExpr e;
    e.value = v;
    return e;
  }
};

// A compiled expression.
class Expr {
 public:
  // Values the program's stack may need at most; deeper expressions are refused at load.
  static constexpr int kMaxStack = 64;

  // Parses `text` (grammar of docs/manifest.md); names resolve to indices into `symbols`.
  // Throws Error(CORRUPT_BUNDLE): "manifest: <where>: expression '<text>': <why> at
  // position <n>" (syntax error, unknown symbol, integer too large, nesting too deep).
  static Expr compile(const std::string& text, const std::vector<std::string>& symbols,
                      const std::string& where);

  // Evaluates with symbol i = syms[i]. Returns nullptr and sets *out, or a static text
  // saying why there is no value ("overflows int64", ...). Allocates nothing.
  const char* eval(const int64_t* syms, int64_t* out) const;

  const std::string& text() const { return text_; }
  // The symbol index when the expression is one symbol and nothing else ("S", " (S) "),
  // else -1. Such input dims bind their symbol at run time.
  int single_symbol() const { return single_; }
  // When the expression is k*S + c for one symbol S, an integer k >= 1 and any integer c
  // ("16*h", "2*S + 1", "S"): S's index, with k and c in *k and *c; else -1. An input dim of
  // that form binds S (as (dim - c) / k) when no input dim is S itself (a torch.export
  // derived Dim: a U-Net's image side 16*h).
  int affine_symbol(int64_t* k, int64_t* c) const {
    *k = affine_k_;
    *c = affine_c_;
    return affine_;
  }
  // Indices of the symbols the expression reads, ascending, each once (for messages).
  const std::vector<int>& symbols_used() const { return used_; }

 private:
  enum class Op : uint8_t { Const, Sym, Neg, Add, Sub, Mul, Div, Mod, Min, Max };
  struct Instr {
    Op op;
    int64_t arg;  // Const: the value; Sym: the symbol index
  };
  friend class ExprParser;

  std::string text_;
  std::vector<Instr> code_;
  int single_ = -1;
  int affine_ = -1;
  int64_t affine_k_ = 0, affine_c_ = 0;
  std::vector<int> used_;
};

// Floor division and the matching modulo (result has the divisor's sign) for divisor > 0.
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

}  // namespace aotpack
