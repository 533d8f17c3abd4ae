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
  return code == AOTPACK_IO ? 0 : 1;
}
