/* consumer.c: the C API from an installed aotpack (find_package or pkg-config). Prints the
 * loaded library's version next to the header's and checks a missing bundle is refused. */
#include <stdio.h>
#include <string.h>

#include <aotpack/aotpack.h>

int main(void) {
  printf("consumer-c: aotpack %s (header %s, abi %d)\n", aotpack_version(),
         AOTPACK_VERSION_STRING, AOTPACK_ABI_VERSION);
  aotpack_status* status = aotpack_model_check_file("/nonexistent/model.aotpack", NULL);
  int refused = aotpack_status_code(status) == AOTPACK_IO;
  printf("consumer-c: missing bundle -> %s\n", aotpack_status_code_name(aotpack_status_code(status)));
  aotpack_status_free(status);
  return refused && strcmp(aotpack_version(), AOTPACK_VERSION_STRING) == 0 ? 0 : 1;
}
