/*
 * generate.c — text generation from a plain C program: the token loop of a generation bundle
 * (aotpack build --task text-generation, docs/generation.md) through the C API, with the new
 * tokens streamed as they come.
 *
 * Nothing but libaotpack and, at run time, the NVIDIA driver: the session owns the step's
 * device buffers and its KV cache, so this program allocates no GPU memory of its own and
 * needs no CUDA header. Prompts are token ids (tokenize with the model's tokenizer first).
 *
 * Build (from the repo root): cmake -S . -B build -DAOTPACK_BUILD_EXAMPLES=ON && cmake --build
 * build (gives build/examples/generate), or by hand:
 *   cc -O2 examples/generate.c -I runtime_cpp/include -L build -laotpack \
 *      -Wl,-rpath,$PWD/build -o build/generate
 * Run (one prompt per argument, ids separated by commas; several prompts make a batch):
 *   build/generate out/llm/model.aotpack 64 1,15043,3186
 *   build/generate out/llm/model.aotpack 64 1,15043,3186 1,450 --temperature 0.7 --seed 1
 */
#include <aotpack/aotpack.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROMPTS 64
#define MAX_PROMPT_LEN 65536

/* Prints the error of a failed aotpack call and exits. */
static void check(aotpack_status* st, const char* what) {
  if (st == NULL) return;
  fprintf(stderr, "%s failed [%s]: %s\n", what,
          aotpack_status_code_name(aotpack_status_code(st)), aotpack_status_message(st));
  aotpack_status_free(st);
  exit(1);
}

/* Streams each token as the token loop produces it: "sequence:token". */
static int on_token(void* user_data, size_t sequence, int64_t token, size_t step) {
  (void)user_data;
  (void)step;
  printf("%zu:%lld ", sequence, (long long)token);
  fflush(stdout);
  return 0; /* nonzero would stop the generation here */
}

/* Parses "1,2,3" into ids (at most MAX_PROMPT_LEN); returns the count, 0 on a bad list. */
static size_t parse_ids(const char* text, int64_t* ids) {
  size_t n = 0;
  const char* p = text;
  while (n < MAX_PROMPT_LEN) {
    char* end = NULL;
    long long v = strtoll(p, &end, 10);
    if (end == p || (*end && *end != ',')) return 0;
    ids[n++] = (int64_t)v;
    if (!*end) return n;
    p = end + 1;
  }
  return 0;
}

static void usage(const char* prog) {
  fprintf(stderr, "usage: %s BUNDLE MAX_NEW_TOKENS IDS [IDS...] [--temperature T] [--top-k K] "
                  "[--top-p P] [--seed N]\n  IDS: one prompt's token ids, comma-separated\n",
          prog);
  exit(2);
}

int main(int argc, char** argv) {
  if (argc < 4) usage(argv[0]);
  aotpack_generate_options opt;
  memset(&opt, 0, sizeof opt);
  opt.struct_size = sizeof opt;
  opt.on_token = on_token;
  const int64_t* prompts[MAX_PROMPTS];
  size_t lens[MAX_PROMPTS], batch = 0;
  long max_new = atol(argv[2]);
  if (max_new <= 0) usage(argv[0]);
  for (int i = 3; i < argc; ++i) {
    if (i + 1 < argc && strcmp(argv[i], "--temperature") == 0) opt.temperature = (float)atof(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--top-k") == 0) opt.top_k = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--top-p") == 0) opt.top_p = (float)atof(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--seed") == 0) opt.seed = strtoull(argv[++i], NULL, 10);
    else if (batch < MAX_PROMPTS) {
      int64_t* ids = malloc(MAX_PROMPT_LEN * sizeof *ids);
      lens[batch] = ids ? parse_ids(argv[i], ids) : 0;
      if (lens[batch] == 0) usage(argv[0]);
      prompts[batch++] = ids;
    } else {
      usage(argv[0]);
    }
  }
  if (batch == 0) usage(argv[0]);

  aotpack_model* model = NULL;
  check(aotpack_model_load(argv[1], NULL, &model), "aotpack_model_load");
  aotpack_generation_info info;
  check(aotpack_model_generation_info(model, &info), "aotpack_model_generation_info");
  printf("bundle: max_batch=%lld max_seq_len=%lld vocab_size=%lld eos_ids=%zu, KV cache %llu "
         "bytes per session\n", (long long)info.max_batch, (long long)info.max_seq_len,
         (long long)info.vocab_size, info.num_eos_ids,
         (unsigned long long)aotpack_model_state_bytes(model));
  aotpack_session* session = NULL;
  check(aotpack_session_create(model, NULL, &session), "aotpack_session_create");

  int64_t* tokens = malloc(batch * (size_t)max_new * sizeof *tokens);
  size_t counts[MAX_PROMPTS];
  aotpack_generate_stats stats;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  check(aotpack_session_generate(session, prompts, lens, batch, (size_t)max_new, &opt, tokens,
                                 counts, &stats, NULL),
        "aotpack_session_generate");
  printf("\n");
  for (size_t b = 0; b < batch; ++b) {
    printf("sequence %zu (%zu prompt tokens): %zu new:", b, lens[b], counts[b]);
    for (size_t i = 0; i < counts[b]; ++i) printf(" %lld", (long long)tokens[b * (size_t)max_new + i]);
    printf("\n");
  }
  printf("time to first token %.3f ms, decode %.3f ms for %lld steps, %.1f tokens/s\n",
         stats.ttft_ms, stats.decode_ms, (long long)stats.decode_steps,
         stats.decode_tokens_per_s);

  aotpack_session_free(session);
  aotpack_model_free(model);
  for (size_t b = 0; b < batch; ++b) free((void*)prompts[b]);
  free(tokens);
  return 0;
}
