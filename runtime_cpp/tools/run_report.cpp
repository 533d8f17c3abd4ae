// run_report.cpp — aotpack-run --json (see run_report.hpp).
#include "run_report.hpp"

#include <cmath>
#include <cstdio>

#include "dtype.hpp"
#include "host_tensor.hpp"

namespace aotpack_run {

namespace {

// Length of the well-formed UTF-8 sequence starting at s[i] (1 for ASCII), or 0.
size_t utf8_length(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return 0;
  return n;
}

// A JSON string: quotes, backslashes and control characters escaped; bytes that are not
// UTF-8 (a path in another encoding) become U+FFFD, so strict parsers accept the document.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  return out + "\"";
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// "2, 64": the dims of a shape, comma-separated
std::string dims_text(const std::vector<long long>& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out;
}

std::string output_json(const OutputSummary& o) {
  return "{\"name\": " + quote(o.name) + ", \"dtype\": " + quote(o.dtype) + ", \"shape\": [" +
         dims_text(o.shape) + "], \"mean_abs\": " + number(o.mean_abs) +
         ", \"nonfinite\": " + std::to_string(o.nonfinite) + "}";
}

std::string bench_json(const BenchSummary& b) {
  return "{\"median_ms\": " + number(b.median_ms) + ", \"p10_ms\": " + number(b.p10_ms) +
         ", \"p90_ms\": " + number(b.p90_ms) + ", \"min_ms\": " + number(b.min_ms) +
         ", \"runs\": " + std::to_string(b.runs) + ", \"warmup\": " + std::to_string(b.warmup) +
         ", \"graph\": " + (b.graph ? "true" : "false") + ", \"pdl\": " +
         (b.pdl ? "true" : "false") + "}";
}

}  // namespace

std::vector<OutputSummary> summarize_outputs(const std::vector<aotpack_tensor_info>& outs,
                                             const std::vector<std::vector<uint8_t>>& host) {
  std::vector<OutputSummary> summary;
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& t = outs[i];
    size_t n = size_t(t.nbytes / aotpack::dtype_size(t.dtype));
    double sum_abs = 0;
    size_t nonfinite = 0;
    for (size_t k = 0; k < n; ++k) {
      double v = element(t.dtype, host[i].data(), k);
      if (!std::isfinite(v)) ++nonfinite;
      else sum_abs += std::fabs(v);
    }
    summary.push_back({t.name, t.dtype_name, std::vector<long long>(t.dims, t.dims + t.rank),
                       n ? sum_abs / double(n) : 0.0, nonfinite});
  }
  return summary;
}

void print_outputs(const std::vector<OutputSummary>& summary) {
  for (const auto& o : summary)
    std::printf("output %-24s %-5s [%s] mean_abs=%.6g nonfinite=%zu\n", o.name.c_str(),
                o.dtype.c_str(), dims_text(o.shape).c_str(), o.mean_abs, o.nonfinite);
}

std::string error_json(const std::string& code, const std::string& message) {
  return "{\"error\": {\"code\": " + quote(code) + ", \"message\": " + quote(message) + "}}\n";
}

std::string to_json(const RunReport& r) {
  std::string shapes;
  for (size_t i = 0; i < r.shapes.size(); ++i) {
    const ShapeReport& s = r.shapes[i];
    std::string outs;
    for (size_t k = 0; k < s.outputs.size(); ++k)
      outs += (k ? ", " : "") + output_json(s.outputs[k]);
    shapes += std::string(i ? ",\n  " : "") + "{\"shape\": " + quote(s.shape) +
              ", \"outputs\": [" + outs + "], \"bench\": " +
              (s.benched ? bench_json(s.bench) : "null") + "}";
  }
  return "{\"bundle\": " + quote(r.bundle) + ", \"runtime\": " + quote(r.runtime_version) +
         ", \"device\": " + std::to_string(r.device) + ", \"verify\": " + quote(r.verify) +
         ", \"load_ms\": " + number(r.load_ms) + ",\n \"shapes\": [" + shapes + "]}\n";
}

}  // namespace aotpack_run
