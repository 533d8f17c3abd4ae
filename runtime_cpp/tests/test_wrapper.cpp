// test_wrapper.cpp — the C++ wrapper turns statuses into aotpack::Exception.
#include <string>

#include "aotpack/aotpack.hpp"
#include "bundle_builder.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

TEST(cpp_wrapper_errors) {
  std::string good = TestBundle().write(make_temp_dir("cppok"));
  aotpack::Model::check_file(good);  // must not throw
  bool thrown = false;
  try {
    aotpack::Model::check_file("/nonexistent/model.aotpack");
  } catch (const aotpack::Exception& e) {
    thrown = e.code() == AOTPACK_IO && std::string(e.what()).find("IO: ") == 0;
  }
  EXPECT(thrown);
}

TEST(cpp_wrapper_missing_driver) {
  std::string good = TestBundle().write(make_temp_dir("cppdrv"));
  bool thrown = false;
  try {
    aotpack::Model model(good);
  } catch (const aotpack::Exception& e) {
    thrown = e.code() == AOTPACK_DRIVER_NOT_FOUND;
  }
  EXPECT(thrown);
}
