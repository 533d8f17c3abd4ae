/*
 * embed.c — run an aotpack bundle from a plain C program through the C API.
 *
 * The application owns the GPU memory (inputs, outputs) and the stream; aotpack owns only the
 * weights and, unless we pass one, the workspace. We use the CUDA driver API for our own
 * allocations, as an application that already uses CUDA would.
 *
 * Build (from the repo root, after `cmake -S . -B build && cmake --build build`):
 *   cc -O2 examples/embed.c -I runtime_cpp/include -I /usr/local/cuda/include \
 *      -L build -laotpack -lcuda -Wl,-rpath,$PWD/build -o build/embed
 * Run:
 *   build/embed out/mlp/model.aotpack [weights.safetensors]
 */
#include <aotpack/aotpack.h>
#include <cuda.h>

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

static void check_cu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* msg = NULL;
  cuGetErrorString(r, &msg);
  fprintf(stderr, "%s failed: %s\n", what, msg ? msg : "unknown CUDA error");
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

/* Fills a bf16 input with a deterministic, non-zero pattern in [-1, 1). */
static void fill_input(uint16_t* host, size_t n) {
  uint32_t s = 12345u;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    host[i] = f32_to_bf16((float)(s >> 8) / (float)(1u << 23) - 1.0f);
  }
}

/* Fills an integer input (token ids) with a deterministic pattern in [0, 1000): valid ids of
   any vocabulary of 1000 tokens or more. */
static void fill_ids(void* host, size_t n, int is_i64) {
  uint32_t s = 12345u;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    if (is_i64)
      ((int64_t*)host)[i] = (int64_t)((s >> 8) % 1000u);
    else
      ((int32_t*)host)[i] = (int32_t)((s >> 8) % 1000u);
  }
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
  /* aotpack made the device's primary context current on this thread; we allocate in it. */

  size_t nin = aotpack_model_num_inputs(model), nout = aotpack_model_num_outputs(model);
  uint64_t* in_ptrs = calloc(nin, sizeof *in_ptrs);
  uint64_t* out_ptrs = calloc(nout, sizeof *out_ptrs);
  for (size_t i = 0; i < nin; ++i) {
    aotpack_tensor_info info;
    check(aotpack_model_input_info(model, i, &info), "input_info");
    void* host = malloc(info.nbytes);
    if (info.dtype == AOTPACK_DTYPE_BF16) {
      fill_input(host, info.nbytes / 2);
    } else if (info.dtype == AOTPACK_DTYPE_I64 || info.dtype == AOTPACK_DTYPE_I32) {
      int is_i64 = info.dtype == AOTPACK_DTYPE_I64;
      fill_ids(host, info.nbytes / (is_i64 ? 8 : 4), is_i64);
    } else {
      fprintf(stderr, "this example feeds bf16 and integer (token id) inputs only; %s is %s\n",
              info.name, info.dtype_name);
      free(host);
      return 1;
    }
    CUdeviceptr d;
    check_cu(cuMemAlloc(&d, info.nbytes), "cuMemAlloc");
    check_cu(cuMemcpyHtoD(d, host, info.nbytes), "cuMemcpyHtoD");
    in_ptrs[i] = (uint64_t)d;
    free(host);
  }
  for (size_t i = 0; i < nout; ++i) {
    aotpack_tensor_info info;
    check(aotpack_model_output_info(model, i, &info), "output_info");
    CUdeviceptr d;
    check_cu(cuMemAlloc(&d, info.nbytes), "cuMemAlloc");
    out_ptrs[i] = (uint64_t)d;
  }

  aotpack_session* session = NULL;
  check(aotpack_session_create(model, NULL, &session), "aotpack_session_create");
  CUstream stream;
  check_cu(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(aotpack_session_execute(session, in_ptrs, nin, NULL, out_ptrs, nout, NULL, stream),
        "aotpack_session_execute");
  check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize");

  for (size_t i = 0; i < nout; ++i) {
    aotpack_tensor_info info;
    check(aotpack_model_output_info(model, i, &info), "output_info");
    uint16_t* host = malloc(info.nbytes);
    check_cu(cuMemcpyDtoH(host, out_ptrs[i], info.nbytes), "cuMemcpyDtoH");
    double sum = 0.0;
    size_t bad = 0, n = info.nbytes / 2;
    for (size_t j = 0; j < n; ++j) {
      float v = bf16_to_f32(host[j]);
      if (v != v) ++bad; /* NaN: an element nothing wrote, or a broken kernel */
      sum += v < 0 ? -v : v;
    }
    printf("output %s: %zu elements, mean |y| = %.6f, first = %.6f, NaN = %zu\n", info.name, n,
           sum / (double)n, bf16_to_f32(host[0]), bad);
    free(host);
    if (bad) return 1;
  }

  aotpack_session_free(session);
  for (size_t i = 0; i < nin; ++i) cuMemFree(in_ptrs[i]);
  for (size_t i = 0; i < nout; ++i) cuMemFree(out_ptrs[i]);
  cuStreamDestroy(stream);
  aotpack_model_free(model);
  free(in_ptrs);
  free(out_ptrs);
  return 0;
}
