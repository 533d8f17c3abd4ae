// run_generate.hpp — `aotpack-run BUNDLE --generate N`: the token loop of a text-generation
// bundle (aotpack_session_generate) from the command line, with its timings.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace aotpack_run {

struct GenerateArgs {
  long new_tokens = 0;                       // --generate N (0: not generating)
  std::vector<std::vector<int64_t>> prompts;  // one per --prompt-ids
  long batch = 0;                             // --batch K (0: unset)
  long prompt_len = 0;                        // --prompt-len L (0: unset)
  float temperature = 0, top_p = 1;
  long top_k = 0;
  std::vector<int64_t> stop_ids;  // --stop-id, repeatable
  bool ignore_eos = false;
  std::vector<std::string> flags;  // generation flags given (for usage errors)
};

// Whether `flag` is --generate or one of its flags.
bool is_generate_flag(const std::string& flag);

// Reads `flag` (is_generate_flag) and its value (`value()` takes the next argument, throwing
// when there is none) into `g`; returns "" or the usage error.
std::string parse_generate_flag(const std::string& flag,
                                const std::function<const char*()>& value, GenerateArgs& g);

// Parses "1,2,3" (token ids >= 0); returns "" or the usage error.
std::string parse_id_list(const char* text, std::vector<int64_t>* out);

// The usage error of a generation flag set that does not hold together ("" when it does).
std::string check_generate_args(const GenerateArgs& g);

// Loads the bundle, generates, prints each sequence's ids, then a last line
// "generate: batch=.. prompt=.. new=.. ttft_ms=.. decode_ms=.. decode_steps=.. decode_tok_s=..".
// Throws aotpack::Error on a failed call (a bundle that is not generative, bad prompt ids).
// Then ends the process without freeing anything unless `teardown` (c_api_util.hpp end_run).
void run_generate(const std::string& bundle, const std::string& weights, int device, int verify,
                  bool graph, uint64_t seed, const GenerateArgs& g, bool teardown);

}  // namespace aotpack_run
