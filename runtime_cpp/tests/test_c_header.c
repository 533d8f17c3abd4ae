/* test_c_header.c — aotpack.h is valid C (C99) and the shared library links from C. */
#include <stdio.h>
#include <string.h>

#include "aotpack/aotpack.h"

int main(int argc, char** argv) {
  aotpack_model_options opts;
  memset(&opts, 0, sizeof(opts));
  opts.struct_size = sizeof(opts);
  aotpack_status* status = aotpack_model_check_file(argc > 1 ? argv[1] : "/nonexistent", &opts);
  printf("%s: %s\n", aotpack_status_code_name(aotpack_status_code(status)),
         aotpack_status_message(status));
  int code = (int)aotpack_status_code(status);
  aotpack_status_free(status);
  /* The v2 (dynamic shape) declarations are C too; NULL handles are refused, never crash. */
  aotpack_shape in_shape = {2, {4, 64}}, out_shape;
  aotpack_symbol_info symbol;
  aotpack_session_options session_options;
  memset(&session_options, 0, sizeof(session_options));
  session_options.max_cached_plans = 4;
  const char* expr = NULL;
  int64_t lo = 0, hi = 0;
  aotpack_status* s1 = aotpack_model_output_shapes(NULL, &in_shape, 1, &out_shape, 1);
  aotpack_status* s2 = aotpack_model_symbol_info(NULL, 0, &symbol);
  aotpack_status* s3 = aotpack_model_input_dim(NULL, 0, 0, &expr, &lo, &hi);
  aotpack_status* s4 = aotpack_session_run_shaped(NULL, NULL, &in_shape, NULL, NULL);
  aotpack_status* s5 = aotpack_session_execute(NULL, NULL, 0, &in_shape, NULL, 0, &out_shape,
                                               NULL);
  session_options.cuda_graphs = AOTPACK_CUDA_GRAPHS_OFF;
  session_options.skip_pointer_checks = 0;
  int refused = aotpack_status_code(s1) == AOTPACK_INVALID_ARGUMENT &&
                aotpack_status_code(s2) == AOTPACK_INVALID_ARGUMENT &&
                aotpack_status_code(s3) == AOTPACK_INVALID_ARGUMENT &&
                aotpack_status_code(s4) == AOTPACK_INVALID_ARGUMENT &&
                aotpack_status_code(s5) == AOTPACK_INVALID_ARGUMENT &&
                sizeof(session_options) > AOTPACK_SESSION_OPTIONS_V1_SIZE &&
                aotpack_model_num_symbols(NULL) == 0 && AOTPACK_BUNDLE_FORMAT_VERSION == 2;
  aotpack_status_free(s1);
  aotpack_status_free(s2);
  aotpack_status_free(s3);
  aotpack_status_free(s4);
  aotpack_status_free(s5);
  return code == AOTPACK_IO && refused ? 0 : 1;
}
