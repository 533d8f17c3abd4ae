// expr.cpp — parse (recursive descent → postfix program) and evaluate manifest expressions.
#include "expr.hpp"

#include <algorithm>

#include "error.hpp"

namespace aotpack {

// Recursive descent over the grammar of docs/manifest.md, emitting postfix code:
//   expr  := term (("+" | "-") term)*
//   term  := unary (("*" | "/" | "%") unary)*
//   unary := "-" unary | atom
//   atom  := INTEGER | NAME | ("min" | "max") "(" expr "," expr ")" | "(" expr ")"
class ExprParser {
 public:
  ExprParser(const std::string& text, const std::vector<std::string>& symbols,
             const std::string& where)
      : t_(text), symbols_(symbols), where_(where) {}

  Expr parse() {
    e_.text_ = t_;
    sum();
    if (peek() != '\0') bad("unexpected '", std::string(1, t_[i_]), "'");
    bool one_symbol = e_.code_.size() == 1 && e_.code_[0].op == Expr::Op::Sym;
    e_.single_ = one_symbol ? int(e_.code_[0].arg) : -1;
    for (const auto& in : e_.code_)
      if (in.op == Expr::Op::Sym) e_.used_.push_back(int(in.arg));
    std::sort(e_.used_.begin(), e_.used_.end());
    e_.used_.erase(std::unique(e_.used_.begin(), e_.used_.end()), e_.used_.end());
    find_affine();
    return std::move(e_);
  }

 private:
  void find_affine();

  // Nesting (parentheses, unary minus, min/max) bounds the parser's recursion on hostile input.
  static constexpr int kMaxNesting = 48;

  template <typename... Args>
  [[noreturn]] void bad(Args&&... why) {
    fail(AOTPACK_CORRUPT_BUNDLE, "manifest: ", where_, ": expression '", t_, "': ",
         std::forward<Args>(why)..., " at position ", i_);
  }

  char peek() {
    while (i_ < t_.size() && t_[i_] == ' ') ++i_;
    return i_ < t_.size() ? t_[i_] : '\0';
  }

  void expect(char c) {
    if (peek() != c) {
      if (i_ >= t_.size()) bad("expected '", std::string(1, c), "', got the end");
      bad("expected '", std::string(1, c), "', got '", std::string(1, t_[i_]), "'");
    }
    ++i_;
  }

  // Appends an instruction, tracking the stack height the evaluator will need.
  void emit(Expr::Op op, int64_t arg = 0) {
    e_.code_.push_back({op, arg});
    if (op == Expr::Op::Const || op == Expr::Op::Sym) {
      if (++height_ > Expr::kMaxStack) bad("too complex (more than ", Expr::kMaxStack,
                                           " pending values)");
    } else if (op != Expr::Op::Neg) {
      --height_;
    }
  }

  struct Nest {
    ExprParser& p;
    explicit Nest(ExprParser& parser) : p(parser) {
      if (++p.nesting_ > kMaxNesting) p.bad("nested more than ", kMaxNesting, " levels deep");
    }
    ~Nest() { --p.nesting_; }
  };

  void sum() {
    term();
    for (char c = peek(); c == '+' || c == '-'; c = peek()) {
      ++i_;
      term();
      emit(c == '+' ? Expr::Op::Add : Expr::Op::Sub);
    }
  }

  void term() {
    unary();
    for (char c = peek(); c == '*' || c == '/' || c == '%'; c = peek()) {
      ++i_;
      unary();
      emit(c == '*' ? Expr::Op::Mul : c == '/' ? Expr::Op::Div : Expr::Op::Mod);
    }
  }

  void unary() {
    Nest n(*this);
    if (peek() == '-') {
      ++i_;
      unary();
      emit(Expr::Op::Neg);
      return;
    }
    atom();
  }

  void atom() {
    char c = peek();
    if (c == '(') {
      ++i_;
      Nest n(*this);
      sum();
      expect(')');
    } else if (c >= '0' && c <= '9') {
      number();
    } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      name();
    } else {
      if (c == '\0') bad("expected a number, a name or '(', got the end");
      bad("expected a number, a name or '(', got '", std::string(1, c), "'");
    }
  }

  void number() {
    int64_t v = 0;
    size_t start = i_;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
      if (__builtin_mul_overflow(v, int64_t(10), &v) ||
          __builtin_add_overflow(v, int64_t(t_[i_] - '0'), &v)) {
        i_ = start;
        bad("integer does not fit in int64");
      }
      ++i_;
    }
    emit(Expr::Op::Const, v);
  }

  void name() {
    size_t start = i_;
    auto ident = [](char ch) {
      return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
             (ch >= '0' && ch <= '9');
    };
    while (i_ < t_.size() && ident(t_[i_])) ++i_;
    std::string n = t_.substr(start, i_ - start);
    if (n == "min" || n == "max") {
      Nest nest(*this);
      expect('(');
      sum();
      expect(',');
      sum();
      expect(')');
      emit(n == "min" ? Expr::Op::Min : Expr::Op::Max);
      return;
    }
    for (size_t s = 0; s < symbols_.size(); ++s)
      if (symbols_[s] == n) return emit(Expr::Op::Sym, int64_t(s));
    i_ = start;
    std::string known;
    for (const auto& s : symbols_) known += cat(known.empty() ? "" : ", ", s);
    bad("unknown symbol '", n, "' (the manifest's symbols: ",
        known.empty() ? std::string("none") : known, ")");
  }

  const std::string& t_;
  const std::vector<std::string>& symbols_;
  const std::string& where_;
  size_t i_ = 0;
  int nesting_ = 0;
  int height_ = 0;
  Expr e_;
};

// Runs the program on values of the form k*S + c (S one symbol, or none: a constant) and
// keeps the result when it is that form with k >= 1. Anything else (two symbols, S*S, a
// division or min/max of S, an overflow) is not affine.
void ExprParser::find_affine() {
  struct Lin {
    int sym;  // -1: a constant
    int64_t k, c;
  };
  Lin st[Expr::kMaxStack];
  int n = 0;
  for (const auto& in : e_.code_) {
    if (in.op == Expr::Op::Const || in.op == Expr::Op::Sym) {
      st[n++] = in.op == Expr::Op::Const ? Lin{-1, 0, in.arg} : Lin{int(in.arg), 1, 0};
      continue;
    }
    bool ok = true;
    if (in.op == Expr::Op::Neg) {
      Lin& a = st[n - 1];
      ok = !__builtin_sub_overflow(int64_t(0), a.k, &a.k) &&
           !__builtin_sub_overflow(int64_t(0), a.c, &a.c);
      if (!ok) return;
      continue;
    }
    Lin b = st[--n], &a = st[n - 1];
    if (a.sym >= 0 && b.sym >= 0 && a.sym != b.sym) return;
    int sym = a.sym >= 0 ? a.sym : b.sym;
    switch (in.op) {
      case Expr::Op::Add:
      case Expr::Op::Sub:
        if (in.op == Expr::Op::Sub) {
          ok = !__builtin_sub_overflow(int64_t(0), b.k, &b.k) &&
               !__builtin_sub_overflow(int64_t(0), b.c, &b.c);
        }
        ok = ok && !__builtin_add_overflow(a.k, b.k, &a.k) && !__builtin_add_overflow(a.c, b.c, &a.c);
        break;
      case Expr::Op::Mul: {
        if (a.sym >= 0 && b.sym >= 0) return;  // S*S
        const Lin& lin = a.sym >= 0 ? a : b;
        int64_t f = a.sym >= 0 ? b.c : a.c;
        Lin r{sym, 0, 0};
        ok = !__builtin_mul_overflow(lin.k, f, &r.k) && !__builtin_mul_overflow(lin.c, f, &r.c);
        a = r;
        break;
      }
      default:  // / % min max: affine only between constants
        if (sym >= 0) return;
        {
          const char* why = nullptr;
          int64_t v = 0;
          Expr pair;
          pair.code_ = {{Expr::Op::Const, a.c}, {Expr::Op::Const, b.c}, in};
          why = pair.eval(nullptr, &v);
          if (why) return;
          a.c = v;
        }
    }
    if (!ok) return;
    a.sym = a.k == 0 ? -1 : sym;
  }
  if (n == 1 && st[0].sym >= 0 && st[0].k >= 1) {
    e_.affine_ = st[0].sym;
    e_.affine_k_ = st[0].k;
    e_.affine_c_ = st[0].c;
  }
}

Expr Expr::compile(const std::string& text, const std::vector<std::string>& symbols,
                   const std::string& where) {
  return ExprParser(text, symbols, where).parse();
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}

const char* Expr::eval(const int64_t* syms, int64_t* out) const {
  int64_t st[kMaxStack];
  int n = 0;
  for (const Instr& in : code_) {
    if (in.op == Op::Const || in.op == Op::Sym) {
      st[n++] = in.op == Op::Const ? in.arg : syms[in.arg];
      continue;
    }
    if (in.op == Op::Neg) {
      if (st[n - 1] == INT64_MIN) return "overflows int64";
      st[n - 1] = -st[n - 1];
      continue;
    }
    int64_t b = st[--n], &a = st[n - 1];
    bool overflow = false;
    switch (in.op) {
      case Op::Add: overflow = __builtin_add_overflow(a, b, &a); break;
      case Op::Sub: overflow = __builtin_sub_overflow(a, b, &a); break;
      case Op::Mul: overflow = __builtin_mul_overflow(a, b, &a); break;
      case Op::Div:
      case Op::Mod:
        if (b <= 0) return "divides by a number <= 0";
        a = in.op == Op::Div ? floor_div(a, b) : floor_mod(a, b);
        break;
      case Op::Min: a = std::min(a, b); break;
      case Op::Max: a = std::max(a, b); break;
      default: break;
    }
    if (overflow) return "overflows int64";
  }
  *out = st[0];
  return nullptr;
}

}  // namespace aotpack
