/*
 * embed.c — run an aotpack bundle from a plain C program through the C API.
 *
 * Only aotpack.h and libaotpack: no CUDA toolkit, no cuda.h, no -lcuda. The program owns its
 * GPU memory (inputs, outputs) and the stream, made with aotpack_device_* / aotpack_stream_*;
 * aotpack owns the weights and, unless we pass one, the workspace. (A program that already uses
 * CUDA passes its own cuMemAlloc'd pointers and streams instead.)
 *
 * Build (from a bundle's output folder, which holds include/ and lib/):
 *   cc -O2 embed.c -I include -L lib -laotpack -Wl,-rpath,$PWD/lib -o embed
 * or from the repo root after `cmake -S . -B build && cmake --build build`: build/examples/embed
 * Run:
 *   embed out/mlp/model.aotpack [weights.safetensors]
 */
#include <aotpack/aotpack.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints the error of a failed aotpack call and exits. */
static void check(aotpack_status* st, const char* what) {
  if (st == NULL) return;
  fprintf(stderr, "%s failed [%s]: %s\n", what,
          aotpack_status_code_name(aotpack_status_code(st)), aotpack_status_message(st));
  aotpack_status_free(st);
  exit(1);
}

/* bf16 is the top half of an IEEE float. */
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A deterministic, non-zero pattern in [-1, 1). */
static float pattern(uint32_t* s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / (float)(1u << 23) - 1.0f;
}

/* Fills input `info` in host memory: floats with the pattern, integers (token ids) with values
 * in [0, 1000), valid ids of any vocabulary of 1000 tokens or more. 0 for a dtype it cannot. */
static int fill_input(void* host, const aotpack_tensor_info* info) {
  uint32_t s = 12345u;
  size_t n;
  switch (info->dtype) {
    case AOTPACK_DTYPE_BF16:
      for (n = 0; n < info->nbytes / 2; ++n) ((uint16_t*)host)[n] = f32_to_bf16(pattern(&s));
      return 1;
    case AOTPACK_DTYPE_F32:
      for (n = 0; n < info->nbytes / 4; ++n) ((float*)host)[n] = pattern(&s);
      return 1;
    case AOTPACK_DTYPE_I64:
      for (n = 0; n < info->nbytes / 8; ++n)
        ((int64_t*)host)[n] = (int64_t)((pattern(&s) + 1.0f) * 499.9f);
      return 1;
    case AOTPACK_DTYPE_I32:
      for (n = 0; n < info->nbytes / 4; ++n)
        ((int32_t*)host)[n] = (int32_t)((pattern(&s) + 1.0f) * 499.9f);
      return 1;
    default:
      return 0;
  }
}

/* Element `j` of an output as a float (bf16 and f32 outputs; NaN for other dtypes). */
static float output_value(const void* host, aotpack_dtype dtype, size_t j) {
  if (dtype == AOTPACK_DTYPE_BF16) return bf16_to_f32(((const uint16_t*)host)[j]);
  if (dtype == AOTPACK_DTYPE_F32) return ((const float*)host)[j];
  return 0.0f / 0.0f;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s BUNDLE [WEIGHTS]\n", argv[0]);
    return 2;
  }
  aotpack_model_options mopt;
  memset(&mopt, 0, sizeof mopt);
  mopt.struct_size = sizeof mopt;
  mopt.weights_path = argc > 2 ? argv[2] : NULL;

  aotpack_model* model = NULL;
  check(aotpack_model_load(argv[1], &mopt, &model), "aotpack_model_load");

  size_t nin = aotpack_model_num_inputs(model), nout = aotpack_model_num_outputs(model);
  uint64_t* in_ptrs = calloc(nin, sizeof *in_ptrs);
  uint64_t* out_ptrs = calloc(nout, sizeof *out_ptrs);
  for (size_t i = 0; i < nin; ++i) {
    aotpack_tensor_info info;
    check(aotpack_model_input_info(model, i, &info), "input_info");
    void* host = malloc(info.nbytes);
    if (!fill_input(host, &info)) {
      fprintf(stderr, "this example feeds float and integer (token id) inputs only; %s is %s\n",
              info.name, info.dtype_name);
      free(host);
      return 1;
    }
    check(aotpack_device_alloc(model, info.nbytes, &in_ptrs[i]), "aotpack_device_alloc");
    check(aotpack_device_upload(model, in_ptrs[i], host, info.nbytes, NULL),
          "aotpack_device_upload");
    free(host);
  }
  for (size_t i = 0; i < nout; ++i) {
    aotpack_tensor_info info;
    check(aotpack_model_output_info(model, i, &info), "output_info");
    check(aotpack_device_alloc(model, info.nbytes, &out_ptrs[i]), "aotpack_device_alloc");
  }

  aotpack_session* session = NULL;
  check(aotpack_session_create(model, NULL, &session), "aotpack_session_create");
  void* stream = NULL;
  check(aotpack_stream_create(model, &stream), "aotpack_stream_create");
  check(aotpack_session_execute(session, in_ptrs, nin, NULL, out_ptrs, nout, NULL, stream),
        "aotpack_session_execute");
  check(aotpack_stream_synchronize(model, stream), "aotpack_stream_synchronize");

  int failed = 0;
  for (size_t i = 0; i < nout; ++i) {
    aotpack_tensor_info info;
    check(aotpack_model_output_info(model, i, &info), "output_info");
    void* host = malloc(info.nbytes);
    check(aotpack_device_download(model, host, out_ptrs[i], info.nbytes, NULL),
          "aotpack_device_download");
    size_t elem = info.dtype == AOTPACK_DTYPE_BF16 ? 2 : 4, n = info.nbytes / elem, bad = 0;
    double sum = 0.0;
    for (size_t j = 0; j < n; ++j) {
      float v = output_value(host, info.dtype, j);
      if (v != v) ++bad; /* NaN: an element nothing wrote, or a broken kernel */
      sum += v < 0 ? -v : v;
    }
    printf("output %s: %zu elements, mean |y| = %.6f, first = %.6f, NaN = %zu\n", info.name, n,
           sum / (double)n, output_value(host, info.dtype, 0), bad);
    free(host);
    failed |= bad != 0;
  }

  aotpack_session_free(session);
  for (size_t i = 0; i < nin; ++i) check(aotpack_device_free(model, in_ptrs[i]), "free");
  for (size_t i = 0; i < nout; ++i) check(aotpack_device_free(model, out_ptrs[i]), "free");
  check(aotpack_stream_destroy(model, stream), "aotpack_stream_destroy");
  aotpack_model_free(model);
  free(in_ptrs);
  free(out_ptrs);
  return failed;
}
