// consumer.cpp: the C++ wrapper (aotpack.hpp) from an installed aotpack, linked shared or
// static. Prints the version and checks errors arrive as aotpack::Exception.
#include <cstdio>

#include <aotpack/aotpack.hpp>

int main() {
  std::printf("consumer-cpp: aotpack %s (header %s)\n", aotpack::version().c_str(),
              AOTPACK_VERSION_STRING);
  try {
    aotpack::Model::check_file("/nonexistent/model.aotpack");
  } catch (const aotpack::Exception& e) {
    std::printf("consumer-cpp: missing bundle -> %s\n", aotpack_status_code_name(e.code()));
    return e.code() == AOTPACK_IO && aotpack::version() == AOTPACK_VERSION_STRING ? 0 : 1;
  }
  std::printf("consumer-cpp: a missing bundle was accepted\n");
  return 1;
}
