// json.cpp — recursive-descent JSON parser with a depth limit (see json.hpp).
#include "json.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <unordered_set>
#include <utility>
#include <vector>

#include "error.hpp"

namespace aotpack {
namespace json {

const Value* Value::find(const std::string& key) const {
  if (type != Type::Object) return nullptr;
  for (const auto& kv : fields)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

const char* Value::type_name(Type t) {
  switch (t) {
    case Type::Null: return "null";
    case Type::Bool: return "bool";
    case Type::Int: return "integer";
    case Type::Double: return "number";
    case Type::String: return "string";
    case Type::Array: return "array";
    case Type::Object: return "object";
  }
  return "?";
}

namespace {

class Parser {
 public:
  Parser(const char* p, size_t n, const std::string& what) : p_(p), n_(n), what_(what) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != n_) error("trailing characters after the JSON value");
    return v;
  }

 private:
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& what_;
  std::vector<std::pair<std::string, Value>> fields_;  // members of the objects still open
  std::vector<Value> items_;                           // items of the arrays still open

  [[noreturn]] void error(const char* msg) {
    fail(AOTPACK_CORRUPT_BUNDLE, what_, ": invalid JSON at byte ", pos_, ": ", msg);
  }
  bool eof() const { return pos_ >= n_; }
  char peek() const { return eof() ? '\0' : p_[pos_]; }
  void skip_ws() {
    while (!eof() && (p_[pos_] == ' ' || p_[pos_] == '\t' || p_[pos_] == '\n' || p_[pos_] == '\r'))
      ++pos_;
  }
  void expect_literal(const char* lit) {
    size_t len = std::strlen(lit);
    if (n_ - pos_ < len || std::memcmp(p_ + pos_, lit, len) != 0) error("unexpected token");
    pos_ += len;
  }

  Value parse_value(int depth) {
    // Depth limit: untrusted headers must not be able to overflow the stack.
    if (depth > kMaxDepth) error("nesting deeper than 64 levels");
    skip_ws();
    if (eof()) error("unexpected end of input");
    Value v;
    char c = peek();
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') { v.type = Type::String; v.s = parse_string(); return v; }
    if (c == 't') { expect_literal("true"); v.type = Type::Bool; v.b = true; return v; }
    if (c == 'f') { expect_literal("false"); v.type = Type::Bool; v.b = false; return v; }
    if (c == 'n') { expect_literal("null"); return v; }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    error("unexpected character");
  }

  // Members and items are parsed onto one stack each and moved into an exactly sized vector
  // when their object or array closes: no growth by doubling (a generation manifest has ~10^5
  // values; the copies and the fresh pages they fault in were a third of its load).
  // stack[base..] moved into a vector of exactly that size; the stack keeps its capacity.
  template <class T>
  static std::vector<T> pop_from(std::vector<T>& stack, size_t base) {
    std::vector<T> out(std::make_move_iterator(stack.begin() + long(base)),
                       std::make_move_iterator(stack.end()));
    stack.resize(base);
    return out;
  }

  Value parse_object(int depth) {
    Value v;
    v.type = Type::Object;
    ++pos_;  // '{'
    skip_ws();
    if (peek() == '}') { ++pos_; return v; }
    const size_t base = fields_.size();
    // Duplicate keys are refused. Small objects are scanned; big ones (a safetensors header
    // lists every tensor of a checkpoint) use a hash set to stay linear.
    std::unordered_set<std::string> seen;
    for (;;) {
      skip_ws();
      if (peek() != '"') error("expected a string key");
      std::string key = parse_string();
      const size_t count = fields_.size() - base;
      if (count == 16)
        for (size_t k = base; k < fields_.size(); ++k) seen.insert(fields_[k].first);
      bool dup = false;
      if (count < 16) {
        for (size_t k = base; k < fields_.size() && !dup; ++k) dup = fields_[k].first == key;
      } else {
        dup = !seen.insert(key).second;
      }
      if (dup) error("duplicate key in object");
      skip_ws();
      if (peek() != ':') error("expected ':'");
      ++pos_;
      Value item = parse_value(depth + 1);
      fields_.emplace_back(std::move(key), std::move(item));
      skip_ws();
      if (peek() == ',') { ++pos_; continue; }
      if (peek() == '}') {
        ++pos_;
        v.fields = pop_from(fields_, base);
        return v;
      }
      error("expected ',' or '}'");
    }
  }

  Value parse_array(int depth) {
    Value v;
    v.type = Type::Array;
    ++pos_;  // '['
    skip_ws();
    if (peek() == ']') { ++pos_; return v; }
    const size_t base = items_.size();
    for (;;) {
      items_.push_back(parse_value(depth + 1));
      skip_ws();
      if (peek() == ',') { ++pos_; continue; }
      if (peek() == ']') {
        ++pos_;
        v.items = pop_from(items_, base);
        return v;
      }
      error("expected ',' or ']'");
    }
  }

  unsigned parse_hex4() {
    if (n_ - pos_ < 4) error("truncated \\u escape");
    unsigned cp = 0;
    for (int k = 0; k < 4; ++k) {
      char h = p_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= unsigned(h - '0');
      else if (h >= 'a' && h <= 'f') cp |= unsigned(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') cp |= unsigned(h - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return cp;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // Decodes an escape after the backslash; handles UTF-16 surrogate pairs.
  void parse_escape(std::string& out) {
    if (eof()) error("truncated escape");
    char e = p_[pos_++];
    switch (e) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: error("unknown escape");
    }
    unsigned cp = parse_hex4();
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (n_ - pos_ < 2 || p_[pos_] != '\\' || p_[pos_ + 1] != 'u') error("lone surrogate");
      pos_ += 2;
      unsigned lo = parse_hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) error("bad low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      error("lone surrogate");
    }
    append_utf8(out, cp);
  }

  // Printable ASCII but the quote and the backslash: copied as it is.
  static bool plain(char c) {
    const unsigned char u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      size_t run = pos_;  // plain ASCII is copied a run at a time
      while (run < n_ && plain(p_[run])) ++run;
      out.append(p_ + pos_, run - pos_);
      pos_ = run;
      if (eof()) error("unterminated string");
      char c = p_[pos_++];
      if (c == '"') return out;
      if (c == '\\') { parse_escape(out); continue; }
      if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
      if (static_cast<unsigned char>(c) >= 0x80) {
        --pos_;
        copy_utf8(out);
        continue;
      }
      out += c;
    }
  }

  // One UTF-8 encoded character, validated as strictly as Python's decoder (no overlong
  // forms, no surrogates, at most U+10FFFF), so both readers accept the same headers.
  void copy_utf8(std::string& out) {
    const unsigned char b0 = static_cast<unsigned char>(p_[pos_]);
    size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
    if (len == 0 || b0 > 0xF4 || n_ - pos_ < len) error("invalid UTF-8 in string");
    unsigned cp = b0 & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      unsigned char b = static_cast<unsigned char>(p_[pos_ + k]);
      if ((b & 0xC0) != 0x80) error("invalid UTF-8 in string");
      cp = (cp << 6) | (b & 0x3F);
    }
    static const unsigned kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      error("invalid UTF-8 in string");
    out.append(p_ + pos_, len);
    pos_ += len;
  }

  Value parse_number() {
    size_t start = pos_;
    bool is_int = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      error("bad number");
    }
    if (peek() == '.') {
      is_int = false;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) error("bad fraction");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      is_int = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) error("bad exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    std::string tok(p_ + start, pos_ - start);  // strtoll/strtod need a terminated string
    Value v;
    if (is_int) {
      errno = 0;
      long long x = std::strtoll(tok.c_str(), nullptr, 10);
      if (errno != ERANGE) {
        v.type = Type::Int;
        v.i = x;
        v.d = double(x);
        return v;
      }
    }
    v.type = Type::Double;
    v.d = std::strtod(tok.c_str(), nullptr);
    if (!std::isfinite(v.d)) error("number out of range");
    return v;
  }
};

}  // namespace

Value parse(const char* text, size_t size, const std::string& what) {
  Parser p(text, size, what);
  return p.parse_document();
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  out += '"';
  return out;
}

std::string dump(const Value& v) {
  switch (v.type) {
    case Type::Null: return "null";
    case Type::Bool: return v.b ? "true" : "false";
    case Type::Int: return std::to_string(v.i);
    case Type::Double: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.17g", v.d);
      return buf;
    }
    case Type::String: return quote(v.s);
    case Type::Array: {
      std::string s = "[";
      for (size_t i = 0; i < v.items.size(); ++i) s += (i ? "," : "") + dump(v.items[i]);
      return s + "]";
    }
    case Type::Object: {
      std::string s = "{";
      for (size_t i = 0; i < v.fields.size(); ++i)
        s += (i ? "," : "") + quote(v.fields[i].first) + ":" + dump(v.fields[i].second);
      return s + "}";
    }
  }
  return "null";
}

}  // namespace json
}  // namespace aotpack
