// run_info.cpp — `aotpack-run BUNDLE --info`: the bundle as the host-side verification sees it
// (no driver needed): signature (dims that vary as their expressions), symbols, weights,
// arena, state buffers, the generation section, kernels and steps (grids and `when`
// conditions as written).
#include "run_info.hpp"

#include <cstdio>

#include "bundle.hpp"
#include "dtype.hpp"
#include "error.hpp"

namespace aotpack_run {

namespace {

using aotpack::cat;

std::string expr_text(const aotpack::Manifest& m, const aotpack::IntExpr& e) {
  return e.is_const() ? std::to_string(e.value) : m.exprs[size_t(e.expr)].text();
}

std::string dims_text(const aotpack::Manifest& m, const std::vector<aotpack::IntExpr>& dims) {
  std::string s = "[";
  for (size_t k = 0; k < dims.size(); ++k) s += cat(k ? ", " : "", expr_text(m, dims[k]));
  return s + "]";
}

void print_tensors(const aotpack::Manifest& m, const std::vector<aotpack::TensorSpec>& list,
                   const char* what) {
  for (const auto& t : list)
    std::printf("%-6s %-24s %-5s %s\n", what, t.name.c_str(),
                aotpack::dtype_manifest_name(t.dtype), dims_text(m, t.dims).c_str());
}

void print_steps(const aotpack::Manifest& m) {
  for (size_t i = 0; i < m.steps.size(); ++i) {
    const auto& st = m.steps[i];
    bool fixed = st.grid[0].is_const() && st.grid[1].is_const() && st.grid[2].is_const();
    std::string grid = fixed ? cat(st.grid[0].value, "x", st.grid[1].value, "x", st.grid[2].value)
                             : cat("[", expr_text(m, st.grid[0]), ", ", expr_text(m, st.grid[1]),
                                   ", ", expr_text(m, st.grid[2]), "]");
    std::string when;
    for (const auto& c : st.when)
      when += cat(" when ", c.min, "<=", expr_text(m, c.expr), "<=", c.max);
    std::printf("step %zu kernel=%s grid=%s args=%zu%s\n", i,
                m.kernels[st.kernel].name.c_str(), grid.c_str(), st.args.size(), when.c_str());
  }
}

void print_generation(const aotpack::Manifest& m) {
  for (const auto& t : m.state)
    std::printf("state  %-24s %-5s %s\n", t.name.c_str(), aotpack::dtype_manifest_name(t.dtype),
                dims_text(m, t.dims).c_str());
  if (!m.state.empty())
    std::printf("state: %zu buffers, %llu bytes per session\n", m.state.size(),
                (unsigned long long)m.state_bytes);
  const aotpack::GenerationSpec& g = m.generation;
  if (!g.present) return;
  std::string eos;
  for (int64_t id : g.eos_ids) eos += cat(eos.empty() ? "" : ",", id);
  std::printf("generation: max_batch=%lld max_seq_len=%lld vocab_size=%lld eos_ids=[%s] "
              "input_ids=%s positions=%s last_index=%s next_ids=%s logits=%s\n",
              (long long)g.max_batch, (long long)g.max_seq_len, (long long)g.vocab_size,
              eos.c_str(), m.inputs[g.input_ids].name.c_str(), m.inputs[g.positions].name.c_str(),
              m.inputs[g.last_index].name.c_str(), m.outputs[g.next_ids].name.c_str(),
              m.outputs[g.logits].name.c_str());
}

}  // namespace

void print_info(const std::string& bundle, const std::string& weights, int verify) {
  auto b = aotpack::check_bundle(bundle, weights,
                                 aotpack::verify_mode(verify, aotpack::Verify::Fast));
  const aotpack::Manifest& m = b->manifest;
  std::printf("bundle: %s (format v%lld, target %s cc %d.%d, driver for CUDA %lld.%lld or "
              "newer)\n", bundle.c_str(), (long long)m.version, m.arch.c_str(), m.cc_major,
              m.cc_minor, (long long)m.min_driver / 1000, (long long)m.min_driver % 1000 / 10);
  for (const auto& s : m.symbols)
    std::printf("symbol %-24s %lld..%lld%s\n", s.name.c_str(), (long long)s.min,
                (long long)s.max,
                s.example >= 0 ? cat(" example=", s.example).c_str() : "");
  print_tensors(m, m.inputs, "input");
  print_tensors(m, m.outputs, "output");
  uint64_t wbytes = 0;
  for (const auto& w : m.weights) wbytes += w.nbytes;
  std::printf("weights: %zu tensors, %llu bytes%s\n", m.weights.size(),
              (unsigned long long)wbytes, m.external_weights ? " (external)" : "");
  std::printf("arena: %llu bytes%s\n", (unsigned long long)m.arena_bytes,
              m.symbols.empty() ? "" : " (for every shape)");
  print_generation(m);
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    const auto& k = m.kernels[i];
    std::printf("kernel %zu %-20s entry=%s block=%ux%ux%u cluster=%ux%ux%u smem=%u %s\n", i,
                k.name.c_str(), k.entry.c_str(), k.block[0], k.block[1], k.block[2],
                k.cluster[0], k.cluster[1], k.cluster[2], k.smem, k.backend.c_str());
  }
  print_steps(m);
}

}  // namespace aotpack_run
