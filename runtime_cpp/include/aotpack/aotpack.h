/*
 * aotpack.h — C API of the aotpack runtime.
 *
 * The runtime runs a bundle (`model.aotpack`, see docs/manifest.md) with only the NVIDIA
 * driver (libcuda.so.1, opened with dlopen at load time; no CUDA toolkit, no Python).
 *
 * Conventions (IREE-style):
 *  - Every fallible function returns `aotpack_status*`: NULL means success; otherwise the
 *    caller owns the status and must release it with aotpack_status_free().
 *  - Handles are opaque. Options structs start with `size_t struct_size` (set it to
 *    sizeof(the struct)); passing NULL options means "all defaults".
 *  - No function aborts or lets a C++ exception escape.
 *  - Memory for inputs, outputs and (optionally) the workspace is owned by the caller
 *    (ExecuTorch-style): the runtime never frees what it did not allocate.
 *  - Device pointers are `uint64_t` (CUdeviceptr); streams are `void*` (CUstream; NULL is the
 *    legacy default stream).
 *
 * Threads: an aotpack_model is immutable after load and may be shared by any number of
 * threads. An aotpack_session is NOT thread-safe: use one session per thread.
 */
#ifndef AOTPACK_AOTPACK_H_
#define AOTPACK_AOTPACK_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define AOTPACK_API
#else
#define AOTPACK_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this runtime (semantic: MAJOR.MINOR.PATCH). CMakeLists.txt's project(VERSION),
 * aotpack/__init__.py's __version__ (the Python package's, via pyproject.toml) and these agree:
 * CMake refuses to configure otherwise and tests/test_version_sources.py checks all three.
 * aotpack_version() returns AOTPACK_VERSION_STRING of the library actually loaded, which may be
 * newer than the header a program was compiled with. */
#define AOTPACK_VERSION_MAJOR 0
#define AOTPACK_VERSION_MINOR 2
#define AOTPACK_VERSION_PATCH 0
#define AOTPACK_VERSION_STRING "0.2.0"
/* Binary interface of libaotpack.so: its SONAME is libaotpack.so.<AOTPACK_ABI_VERSION>. Raised
 * when a program built against an older header could break with this library (a removed or
 * changed function or struct layout); additions keep it (new functions, fields appended to an
 * options struct: its struct_size tells old callers apart). */
#define AOTPACK_ABI_VERSION 0

/* Newest bundle format this runtime reads (manifest "version"); it reads every older one too
 * (version 1: static shapes; version 2: dims that vary at run time, see "Dynamic shapes").
 * Since 0.2 every bundle must also carry its manifest's sha256 (docs/manifest.md): one
 * written by an older aotpack is UNSUPPORTED_VERSION ("rebuild the bundle"). */
#define AOTPACK_BUNDLE_FORMAT_VERSION 2
/* Maximum tensor rank (aotpack_tensor_info.dims, aotpack_shape.dims). */
#define AOTPACK_MAX_RANK 8

/* ------------------------------------------------------------------------------------------
 * Status
 * ---------------------------------------------------------------------------------------- */

/* Why an operation failed. Values are stable (the Python binding mirrors them). */
typedef enum aotpack_code {
  AOTPACK_OK = 0,
  AOTPACK_INVALID_ARGUMENT = 1,    /* bad pointer/option/size passed by the caller */
  AOTPACK_IO = 2,                  /* a file could not be opened/read/written, is not a regular
                                      file, or changed while it was read */
  AOTPACK_CORRUPT_BUNDLE = 3,      /* bundle bytes/JSON/manifest are malformed or inconsistent */
  AOTPACK_UNSUPPORTED_VERSION = 4, /* manifest format version (or a feature) this runtime lacks */
  AOTPACK_CHECKSUM_MISMATCH = 5,   /* the manifest's or a cubin's sha256 differs from the record */
  AOTPACK_WEIGHTS_MISMATCH = 6,    /* a weight is missing or has another dtype/shape/sha256 */
  AOTPACK_DRIVER_NOT_FOUND = 7,    /* libcuda.so.1 could not be loaded / lacks a symbol */
  AOTPACK_DRIVER_TOO_OLD = 8,      /* driver version < manifest target.min_driver */
  AOTPACK_DEVICE_MISMATCH = 9,     /* wrong compute capability / not enough shared memory
                                      (the message says what the bundle needs and the device has) */
  AOTPACK_CUDA_ERROR = 10,         /* a CUDA driver call failed (message names call + step) */
  AOTPACK_OUT_OF_MEMORY = 11,      /* host or device allocation failed */
  AOTPACK_INTERNAL = 12,           /* a bug in aotpack: please report it */
} aotpack_code;

/* Opaque error object: a code and a human-readable message. */
typedef struct aotpack_status aotpack_status;

/* Code of `status` (AOTPACK_OK when status is NULL). */
AOTPACK_API aotpack_code aotpack_status_code(const aotpack_status* status);
/* Message of `status` ("OK" when NULL). Valid until aotpack_status_free(status). */
AOTPACK_API const char* aotpack_status_message(const aotpack_status* status);
/* Static name of a code, e.g. "CORRUPT_BUNDLE". */
AOTPACK_API const char* aotpack_status_code_name(int code);
/* Releases `status` (NULL is fine). */
AOTPACK_API void aotpack_status_free(aotpack_status* status);

/* Version string of the loaded runtime library, e.g. "0.2.0" (AOTPACK_VERSION_STRING
 * of the build it came from). */
AOTPACK_API const char* aotpack_version(void);

/* ------------------------------------------------------------------------------------------
 * Model: a validated bundle loaded onto one device (cubins loaded, weights uploaded).
 * ---------------------------------------------------------------------------------------- */

typedef struct aotpack_model aotpack_model;

/* Options of aotpack_model_load / aotpack_model_check_file. Zero-initialize, then set
 * struct_size = sizeof(aotpack_model_options): every zero field is its default. */
typedef struct aotpack_model_options {
  size_t struct_size;
  /* External weights file (safetensors), anywhere the caller chooses. NULL: the manifest's
   * external_weights.file, relative to the bundle's folder (the bundle can only name a file
   * inside its folder). Ignored when the bundle embeds its weights. */
  const char* weights_path;
  /* CUDA device ordinal (default 0). */
  int device_ordinal;
  /* How the weights are checked against the bundle (an aotpack_verify value; 0: FAST). The
   * manifest and every cubin are always checked against their sha256: they are what is
   * launched. Read only when struct_size >= AOTPACK_MODEL_OPTIONS_V2_SIZE (it lies where
   * earlier structures had padding). */
  int verify;
  int reserved[3]; /* zero */
} aotpack_model_options;
/* sizeof(aotpack_model_options) since `verify` was added (after 0.2.0); 24 before. */
#define AOTPACK_MODEL_OPTIONS_V2_SIZE 40

/* aotpack_model_options.verify: what a load costs against what it catches (docs/manifest.md
 * "Verification"). Every mode checks each weight's name, dtype, shape and size first. */
typedef enum aotpack_verify {
  /* The default: FAST for aotpack_model_load, FULL for aotpack_model_check_file. */
  AOTPACK_VERIFY_DEFAULT = 0,
  /* sha256 of every weight byte (~1-2 GB/s per core, spread over the host's cores; the
   * largest weight bounds it): also refuses a weights file crafted to pass FAST. */
  AOTPACK_VERIFY_FULL = 1,
  /* A 64-bit checksum of every weight byte (several GB/s per core): refuses any single
   * changed word, a truncated, stale or swapped weights file, bit rot; not a deliberate
   * forgery. A bundle that records no checksums (built by an earlier aotpack) gets FULL. */
  AOTPACK_VERIFY_FAST = 2,
  /* Names, dtypes, shapes and sizes only: wrong numbers in a weight go unnoticed (never an
   * out-of-bounds access: every pointer is checked against the manifest either way). */
  AOTPACK_VERIFY_NONE = 3,
} aotpack_verify;

/* Element types of inputs/outputs/weights (manifest spelling in comments). */
typedef enum aotpack_dtype {
  AOTPACK_DTYPE_BF16 = 0, /* bf16 */
  AOTPACK_DTYPE_F16 = 1,  /* f16 */
  AOTPACK_DTYPE_F32 = 2,  /* f32 */
  AOTPACK_DTYPE_F64 = 3,  /* f64 */
  AOTPACK_DTYPE_I8 = 4,   /* i8 */
  AOTPACK_DTYPE_I16 = 5,  /* i16 */
  AOTPACK_DTYPE_I32 = 6,  /* i32 */
  AOTPACK_DTYPE_I64 = 7,  /* i64 */
  AOTPACK_DTYPE_U8 = 8,   /* u8 */
  AOTPACK_DTYPE_BOOL = 9, /* bool */
  /* f8e4m3 (safetensors F8_E4M3): FP8 weights and intermediates of --precision fp8 bundles;
   * never an input or output of a bundle today */
  AOTPACK_DTYPE_F8E4M3 = 10,
} aotpack_dtype;

/* Description of one input or output. Strings point into the model and live as long as it. */
typedef struct aotpack_tensor_info {
  const char* name;
  aotpack_dtype dtype;
  const char* dtype_name; /* manifest spelling: "bf16", ... */
  int32_t rank;
  /* Outermost first; entries >= rank are 0. A dim that varies at run time (bundle v2) is -1:
   * aotpack_model_input_dim / output_dim give its expression and range. */
  int64_t dims[AOTPACK_MAX_RANK];
  /* Bytes of the contiguous tensor; for a tensor with dims that vary, its size with every
   * symbol at its max (the most a run can need). */
  uint64_t nbytes;
} aotpack_tensor_info;

/* The shape of one tensor at run time (aotpack_session_run_shaped,
 * aotpack_model_output_shapes): dims[0 .. rank-1], outermost first. */
typedef struct aotpack_shape {
  int32_t rank;
  int64_t dims[AOTPACK_MAX_RANK];
} aotpack_shape;

/* A symbol of a bundle with dims that vary at run time (manifest v2 "symbols"): an integer
 * every run binds from its input shapes, in [min, max]. `name` lives as long as the model. */
typedef struct aotpack_symbol_info {
  const char* name;
  int64_t min;
  int64_t max;
  int64_t example; /* the shape the model was exported with; -1 when the bundle has none */
} aotpack_symbol_info;

/* Parses and validates the bundle at `path` (as aotpack_model_check_file), initializes the
 * driver, checks the device (compute capability against target.arch, shared memory, driver
 * version: DEVICE_MISMATCH / DRIVER_TOO_OLD saying what the bundle needs and what the machine
 * has), loads every cubin and uploads the weights. `path` must be a regular file; it is read
 * into host memory (released before returning), so a file changed meanwhile is an IO status,
 * never a crash. On success *out owns the model (free with aotpack_model_free). */
AOTPACK_API aotpack_status* aotpack_model_load(const char* path,
                                               const aotpack_model_options* options,
                                               aotpack_model** out);

/* Parses and validates the bundle WITHOUT touching the driver (works on machines with no GPU):
 * the manifest's checksum, its schema (unknown keys refused), cubin and weight checksums,
 * every slot against its cubin's parameter table, bounds, tensor-map rules
 * (docs/manifest.md). Returns NULL if the bundle is valid. */
AOTPACK_API aotpack_status* aotpack_model_check_file(const char* path,
                                                     const aotpack_model_options* options);

/* Releases the caller's reference. Sessions created from the model keep it alive. */
AOTPACK_API void aotpack_model_free(aotpack_model* model);

/* Number of inputs / outputs of the model (0 when model is NULL). */
AOTPACK_API size_t aotpack_model_num_inputs(const aotpack_model* model);
AOTPACK_API size_t aotpack_model_num_outputs(const aotpack_model* model);
/* Fills *info for input/output `index`; INVALID_ARGUMENT when out of range. */
AOTPACK_API aotpack_status* aotpack_model_input_info(const aotpack_model* model, size_t index,
                                                     aotpack_tensor_info* info);
AOTPACK_API aotpack_status* aotpack_model_output_info(const aotpack_model* model, size_t index,
                                                      aotpack_tensor_info* info);
/* Workspace bytes a session needs (manifest arena_bytes). */
AOTPACK_API uint64_t aotpack_model_arena_bytes(const aotpack_model* model);
/* Number of kernels / steps in the plan. */
AOTPACK_API size_t aotpack_model_num_kernels(const aotpack_model* model);
AOTPACK_API size_t aotpack_model_num_steps(const aotpack_model* model);
/* Name ("gemm_0") and entry symbol of kernel `index` (NULL when out of range). */
AOTPACK_API const char* aotpack_model_kernel_name(const aotpack_model* model, size_t index);
AOTPACK_API const char* aotpack_model_kernel_entry(const aotpack_model* model, size_t index);
/* Device ordinal the model was loaded on. */
AOTPACK_API int aotpack_model_device(const aotpack_model* model);

/* ------------------------------------------------------------------------------------------
 * Dynamic shapes (bundle format v2, docs/manifest.md "Manifest v2"). A model has symbols when
 * some input/output dims vary at run time; every run then passes the input shapes
 * (aotpack_session_run_shaped). A v1 bundle has none and every call below still works.
 * ---------------------------------------------------------------------------------------- */

/* Number of symbols (0 for a model whose shapes are all static, and when model is NULL). */
AOTPACK_API size_t aotpack_model_num_symbols(const aotpack_model* model);
/* Fills *info for symbol `index`; INVALID_ARGUMENT when out of range. */
AOTPACK_API aotpack_status* aotpack_model_symbol_info(const aotpack_model* model, size_t index,
                                                      aotpack_symbol_info* info);
/* Dim `dim` of input/output `index`: *expr = its expression ("2*S"; it lives as long as the
 * model) or NULL for a static dim; *min / *max = its value with every symbol at its min / at
 * its max (both the dim itself when static). Any of expr, min, max may be NULL.
 * INVALID_ARGUMENT when index or dim is out of range. */
AOTPACK_API aotpack_status* aotpack_model_input_dim(const aotpack_model* model, size_t index,
                                                    int32_t dim, const char** expr,
                                                    int64_t* min, int64_t* max);
AOTPACK_API aotpack_status* aotpack_model_output_dim(const aotpack_model* model, size_t index,
                                                     int32_t dim, const char** expr,
                                                     int64_t* min, int64_t* max);
/* Output shapes for the given input shapes, so callers can allocate before running.
 * `input_shapes` has num_inputs entries, `output_shapes` num_outputs (both must equal the
 * model's counts). The input shapes are checked as aotpack_session_run_shaped does (same
 * INVALID_ARGUMENT messages). input_shapes may be NULL only for a model without symbols. */
AOTPACK_API aotpack_status* aotpack_model_output_shapes(const aotpack_model* model,
                                                        const aotpack_shape* input_shapes,
                                                        size_t num_inputs,
                                                        aotpack_shape* output_shapes,
                                                        size_t num_outputs);

/* ------------------------------------------------------------------------------------------
 * Session: per-thread execution state (workspace, tensor-map cache, CUDA graphs).
 * ---------------------------------------------------------------------------------------- */

typedef struct aotpack_session aotpack_session;

/* aotpack_session_options.cuda_graphs. */
typedef enum aotpack_cuda_graphs {
  AOTPACK_CUDA_GRAPHS_DEFAULT = 0, /* the default: on */
  AOTPACK_CUDA_GRAPHS_ON = 1,      /* capture the steps once per (shape, pointer set), replay */
  AOTPACK_CUDA_GRAPHS_OFF = 2,     /* launch each step with cuLaunchKernelEx on every run */
} aotpack_cuda_graphs;

/* Options of aotpack_session_create. Zero-initialize, set struct_size = sizeof(the struct):
 * every zero field means its documented default (session-allocated workspace, CUDA graphs on,
 * programmatic launch on, 8 cached plans, pointers checked). NULL options = all defaults.
 *
 * Compatibility: structures of releases before 0.2 were AOTPACK_SESSION_OPTIONS_V1_SIZE bytes
 * and their third field was `int use_cuda_graph` (0 = off). A caller passing that struct_size
 * keeps that meaning, so programs built against the old header run as before. */
#define AOTPACK_SESSION_OPTIONS_V1_SIZE 40
typedef struct aotpack_session_options {
  size_t struct_size;
  /* Caller-owned device workspace (CUdeviceptr, 256-aligned) or 0: the session allocates
   * arena_bytes itself. Checked like inputs (device memory of the model's device, large
   * enough) unless skip_pointer_checks is set. */
  uint64_t workspace;
  /* Size of `workspace` in bytes; must be >= aotpack_model_arena_bytes(). */
  size_t workspace_bytes;
  /* An aotpack_cuda_graphs value (0: the default, on). */
  int cuda_graphs;
  /* 0 (default): kernels the bundle marks as waiting on their predecessor (manifest "pdl")
   * are launched with programmatic dependent launch, so each may start (and prefetch what no
   * kernel writes) while the one before it drains; 1: every kernel waits for the previous one
   * to finish (for A/B timing). */
  int disable_programmatic_launch;
  /* How many (shape, pointer set) plans the session caches, each with its tensor maps and
   * CUDA graph; the least recently used is evicted. 0 (default): 8. */
  int max_cached_plans;
  /* 0 (default): the first run with a new pointer set asks the driver (cuPointerGetAttribute)
   * whether every input/output pointer is device memory of the model's device (or managed
   * memory) with room for its tensor, and refuses it (INVALID_ARGUMENT naming the tensor)
   * otherwise: a host pointer would make the kernels fault and poison the CUDA context.
   * 1: trust the pointers (only for memory the driver cannot describe). */
  int skip_pointer_checks;
  /* Caller-owned device memory for the model's session state (a KV cache; CUdeviceptr,
   * 256-aligned) or 0: the session allocates aotpack_model_state_bytes() itself. Either way
   * the session zeroes it at create and writes it in place on every run; it must stay valid
   * until the session is freed, and two sessions must not share it. Checked like the
   * workspace. Ignored (must be 0) for a model without state. */
  uint64_t state;
  /* Size of `state` in bytes; must be >= aotpack_model_state_bytes(). */
  uint64_t state_bytes;
} aotpack_session_options;

/* Creates a session for `model` (the session keeps the model alive). */
AOTPACK_API aotpack_status* aotpack_session_create(aotpack_model* model,
                                                   const aotpack_session_options* options,
                                                   aotpack_session** out);

/* Enqueues one inference on `stream` (CUstream; NULL = legacy default stream) and returns
 * without waiting. `input_ptrs[i]` / `output_ptrs[i]` are device addresses of contiguous
 * tensors laid out as aotpack_model_input_info / output_info say. The pointers must stay
 * valid until the work on `stream` completes. Tensors read by TMA (tensor maps) must be
 * 16-byte aligned (INVALID_ARGUMENT otherwise). Runs of one session share its workspace:
 * enqueue them on one stream, or order them yourself (events), never concurrently.
 * The first run with a new set of pointers checks them (device memory of the model's device
 * or managed memory, each allocation large enough for its tensor; INVALID_ARGUMENT naming the
 * tensor otherwise, see aotpack_session_options.skip_pointer_checks), encodes tensor maps and
 * captures a CUDA graph (a few hundred microseconds); later runs with the same pointers only
 * replay it. Prefer aotpack_session_execute, which also takes the array lengths.
 * A model with symbols (aotpack_model_num_symbols() > 0) needs aotpack_session_run_shaped:
 * this call returns INVALID_ARGUMENT for it. */
AOTPACK_API aotpack_status* aotpack_session_run(aotpack_session* session,
                                                const uint64_t* input_ptrs,
                                                const uint64_t* output_ptrs, void* stream);

/* aotpack_session_run with the shape of every input (input_shapes[i], one per input): needed
 * for a model with symbols, where each run may have another shape within the symbols' ranges.
 * The runtime binds the symbols from the input dims, checks every dim (INVALID_ARGUMENT naming
 * the input, dim, value and what was expected; nothing is launched and the session stays
 * usable), and the outputs get the shapes aotpack_model_output_shapes gives. Buffers may be
 * larger than the shape needs (e.g. allocated once at the maxima). The first run of a shape
 * also evaluates and checks the bundle at that shape (CORRUPT_BUNDLE if malformed there); it
 * is cached with the pointer set, so a repeated (shape, pointers) run costs what a static run
 * costs. input_shapes may be NULL only for a model without symbols. */
AOTPACK_API aotpack_status* aotpack_session_run_shaped(aotpack_session* session,
                                                       const uint64_t* input_ptrs,
                                                       const aotpack_shape* input_shapes,
                                                       const uint64_t* output_ptrs,
                                                       void* stream);

/* The run call to use (aotpack_session_run and _run_shaped are kept for existing programs):
 * enqueues one inference on `stream` like aotpack_session_run_shaped, with the array lengths
 * passed so they are checked. num_inputs / num_outputs must equal the model's input / output
 * counts (INVALID_ARGUMENT naming both otherwise; nothing is read past them). `input_shapes`:
 * NULL, or num_inputs shapes (required for a model with symbols; for a static model they are
 * checked against its shapes). `output_shapes`: NULL, or num_outputs entries that receive the
 * outputs' shapes of this run. Pointers are checked as aotpack_session_options describes. */
AOTPACK_API aotpack_status* aotpack_session_execute(aotpack_session* session,
                                                    const uint64_t* input_ptrs,
                                                    size_t num_inputs,
                                                    const aotpack_shape* input_shapes,
                                                    const uint64_t* output_ptrs,
                                                    size_t num_outputs,
                                                    aotpack_shape* output_shapes,
                                                    void* stream);

/* Releases the session (waits for nothing: synchronize the stream first). */
AOTPACK_API void aotpack_session_free(aotpack_session* session);

/* ------------------------------------------------------------------------------------------
 * State (docs/generation.md): buffers a bundle keeps on the device between runs, e.g. the KV
 * cache of a language model. Each session allocates its own at aotpack_session_create, zeroed,
 * at a fixed address for the session's life (so its CUDA graphs stay valid); steps read and
 * write them in place; they are freed with the session. A bundle without a "state" list has
 * none and behaves as before. State bytes count toward the session's device memory, not
 * aotpack_model_arena_bytes().
 * ---------------------------------------------------------------------------------------- */

/* Number of state buffers (0 when the bundle has none, and when model is NULL). */
AOTPACK_API size_t aotpack_model_num_states(const aotpack_model* model);
/* Fills *info for state buffer `index` (its shape is static); INVALID_ARGUMENT when out of
 * range. */
AOTPACK_API aotpack_status* aotpack_model_state_info(const aotpack_model* model, size_t index,
                                                     aotpack_tensor_info* info);
/* Device bytes every session of the model allocates for its state (each buffer 256-aligned;
 * 0 without state). */
AOTPACK_API uint64_t aotpack_model_state_bytes(const aotpack_model* model);
/* Enqueues the zeroing of every state buffer on `stream` (as at session creation), and of the
 * session's internal counters (split kernels' fix-up counters, docs/manifest.md; zero at rest
 * already). Not needed between aotpack_session_generate calls: a generation overwrites every
 * cache row before it reads it. */
AOTPACK_API aotpack_status* aotpack_session_reset_state(aotpack_session* session, void* stream);

/* ------------------------------------------------------------------------------------------
 * Text generation (docs/generation.md). A generation bundle's step takes token ids, their
 * positions and the index of each sequence's last token, and returns the next ids (argmax) and
 * the logits; aotpack_session_generate runs the whole token loop: one prefill run with every
 * prompt (right-padded to the longest), then one decode run (one token per sequence) per new
 * token, replaying a CUDA graph captured once per batch size.
 * ---------------------------------------------------------------------------------------- */

/* What a generation bundle accepts (aotpack_model_generation_info). */
typedef struct aotpack_generation_info {
  int64_t max_batch;      /* most sequences one call may generate together */
  int64_t max_seq_len;    /* most tokens of a sequence: prompt + new tokens - 1 (the last new
                             token is never fed back) */
  int64_t vocab_size;     /* token ids are 0 .. vocab_size-1 */
  size_t num_eos_ids;     /* the model's end-of-sequence ids (may be 0) ... */
  const int64_t* eos_ids; /* ... valid while the model lives */
} aotpack_generation_info;

/* Fills *info for a generation bundle (one with a manifest "generation" section);
 * INVALID_ARGUMENT for any other bundle ("not a text-generation bundle"). */
AOTPACK_API aotpack_status* aotpack_model_generation_info(const aotpack_model* model,
                                                          aotpack_generation_info* info);

/* Called once per generated token, in order (for a step, sequence 0 first): `sequence` is the
 * index of the prompt, `token` the new id, `step` 0 for the token of the prefill run and k for
 * the k-th decode run. Return 0 to go on; anything else stops the generation cleanly (the call
 * then returns NULL with what was generated so far, and stats->stopped_by_callback = 1). */
typedef int (*aotpack_token_callback)(void* user_data, size_t sequence, int64_t token,
                                      size_t step);

/* Options of aotpack_session_generate. Zero-initialize, set struct_size = sizeof(the struct):
 * every zero field is its default (greedy, no stop ids but the model's eos ids, no callback).
 * NULL options = all defaults. */
typedef struct aotpack_generate_options {
  size_t struct_size;
  /* 0 (default): greedy, the step's own argmax (only next_ids, B ids per token, is copied to
   * the host). > 0: sample on the host from softmax(logits / temperature), with top_k / top_p
   * below. Must be finite and >= 0. */
  float temperature;
  /* Sampling only: draw among the top_k most likely tokens (0, the default: all). >= 0. */
  int32_t top_k;
  /* Sampling only: draw among the smallest set of most likely tokens whose probability reaches
   * top_p (nucleus sampling), in (0, 1]; 0 means the default, 1 (no cut). Applied after
   * top_k. */
  float top_p;
  /* Sampling only: the seed. A draw depends only on (seed, sequence index, step), so the same
   * call with the same seed generates the same tokens. */
  uint64_t seed;
  /* Ids that end a sequence (the stop id itself is the sequence's last token), besides the
   * model's eos ids. NULL when num_stop_ids is 0. */
  const int64_t* stop_ids;
  size_t num_stop_ids;
  /* 1: the model's eos ids do not end a sequence (only stop_ids and max_new_tokens do). */
  int32_t ignore_eos;
  /* Streaming: called for every new token (see aotpack_token_callback); NULL: none. */
  aotpack_token_callback on_token;
  void* user_data;
  /* Must be zero (room for options of later releases). */
  uint64_t reserved[4];
} aotpack_generate_options;

/* Timings of one aotpack_session_generate call. Set struct_size = sizeof(the struct); the
 * runtime writes only the fields that fit. Times are host wall-clock milliseconds. */
typedef struct aotpack_generate_stats {
  size_t struct_size;
  double ttft_ms;             /* time to first token: inputs up, prefill run, first tokens on
                                 the host */
  double decode_ms;           /* every decode run after that, tokens on the host */
  int64_t decode_steps;       /* decode runs (each gives one token per unfinished sequence) */
  int64_t prompt_tokens;      /* sum of the prompt lengths */
  int64_t generated_tokens;   /* sum of out_counts */
  double decode_tokens_per_s; /* tokens the decode runs generated (all sequences) / decode
                                 time; 0 without decode runs */
  int32_t stopped_by_callback; /* 1 when on_token stopped the generation */
} aotpack_generate_stats;

/* Generates up to `max_new_tokens` tokens for each of `batch` prompts (`prompts[i]` holds
 * `prompt_lens[i]` token ids) and waits for them: the call returns when every sequence has
 * max_new_tokens tokens or has produced a stop id (options; the model's eos ids unless
 * ignore_eos), or when on_token returned nonzero.
 *
 * Output: `out_tokens` (caller-owned host memory, batch × max_new_tokens, row i = sequence i)
 * receives the new tokens; entries past a sequence's count are -1. `out_counts` (batch
 * entries) receives each sequence's count. `stats`: NULL or timings (see above).
 *
 * Checked before anything runs (INVALID_ARGUMENT with a message naming the sequence and the
 * numbers; nothing launched, the session stays usable): a bundle that is not a generation
 * bundle, batch 0 or over max_batch, max_new_tokens 0, an empty prompt, a token id outside
 * [0, vocab_size), prompt_lens[i] + max_new_tokens - 1 over max_seq_len, bad options, NULL
 * arrays, a stream that is being captured (the loop synchronizes `stream` once per token).
 *
 * The session owns the step's device inputs and outputs, allocated at their maxima at the
 * first call. The state (KV cache) is not reset: every row a sequence reads is written first.
 * Work runs on `stream` (NULL: the legacy default stream). Greedy: a sequence's tokens do not
 * depend on the other prompts of the batch (up to the kernels' floating-point order). */
AOTPACK_API aotpack_status* aotpack_session_generate(aotpack_session* session,
                                                     const int64_t* const* prompts,
                                                     const size_t* prompt_lens, size_t batch,
                                                     size_t max_new_tokens,
                                                     const aotpack_generate_options* options,
                                                     int64_t* out_tokens, size_t* out_counts,
                                                     aotpack_generate_stats* stats,
                                                     void* stream);

/* ------------------------------------------------------------------------------------------
 * Device memory and streams without the CUDA toolkit: with these, this header and libaotpack
 * are all a C program needs to run a bundle (examples/embed.c). Every call makes the model's
 * context current on the calling thread and works on the model's device. A program that already
 * uses CUDA may pass its own allocations and streams instead; the two mix freely.
 * ---------------------------------------------------------------------------------------- */

/* Allocates `nbytes` (> 0) of device memory (256-byte aligned) on the model's device:
 * *out_ptr is its device address, for aotpack_session_execute and the copies below.
 * OUT_OF_MEMORY when the device has not that much left. Free with aotpack_device_free. */
AOTPACK_API aotpack_status* aotpack_device_alloc(const aotpack_model* model, uint64_t nbytes,
                                                 uint64_t* out_ptr);

/* Frees memory from aotpack_device_alloc (0: nothing to do). Work using it must be done. */
AOTPACK_API aotpack_status* aotpack_device_free(const aotpack_model* model, uint64_t ptr);

/* Copies `nbytes` from host memory `src` to the device address `dst`. stream NULL: returns
 * when the copy is done; otherwise enqueued on `stream` (a CUstream, e.g. from
 * aotpack_stream_create), and `src` must stay valid until it completes. INVALID_ARGUMENT when
 * [dst, dst + nbytes) is not inside one device allocation of the model's device (or managed
 * memory), or src is NULL; nbytes 0 does nothing. */
AOTPACK_API aotpack_status* aotpack_device_upload(const aotpack_model* model, uint64_t dst,
                                                  const void* src, uint64_t nbytes,
                                                  void* stream);

/* Copies `nbytes` from the device address `src` to host memory `dst`; as upload otherwise
 * (with a stream, read `dst` only after aotpack_stream_synchronize). */
AOTPACK_API aotpack_status* aotpack_device_download(const aotpack_model* model, void* dst,
                                                    uint64_t src, uint64_t nbytes,
                                                    void* stream);

/* A new stream on the model's device that does not synchronize with the legacy default stream
 * (a CUstream; pass it to aotpack_session_execute). Destroy with aotpack_stream_destroy. */
AOTPACK_API aotpack_status* aotpack_stream_create(const aotpack_model* model, void** out_stream);

/* Waits until everything enqueued on `stream` (NULL: the legacy default stream) has finished;
 * a failure of that work (a kernel fault) is returned as CUDA_ERROR. */
AOTPACK_API aotpack_status* aotpack_stream_synchronize(const aotpack_model* model, void* stream);

/* Destroys a stream from aotpack_stream_create (NULL: nothing to do); work already enqueued
 * still completes. */
AOTPACK_API aotpack_status* aotpack_stream_destroy(const aotpack_model* model, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* AOTPACK_AOTPACK_H_ */
