// model.hpp — a verified bundle loaded onto one device: modules, functions, weights.
// Immutable after load(); shared (std::shared_ptr) by the C handle and by sessions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bundle.hpp"
#include "cuda_driver.hpp"
#include "manifest.hpp"

namespace aotpack {

class DeviceUpload;
class LoadTrace;

class Model {
 public:
  // Opens and verifies the bundle (the weights as `verify` says) while the driver starts on
  // another thread, checks the device, loads cubins while the weights stream to the device,
  // and returns once every weight is uploaded and verified (nothing is launched before).
  static std::shared_ptr<const Model> load(const std::string& path,
                                           const std::string& weights_path, int device,
                                           Verify verify);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Manifest& manifest() const { return manifest_; }
  int device_ordinal() const { return ordinal_; }
  cu::CUcontext context() const { return ctx_; }
  cu::CUfunction function(size_t kernel) const { return functions_[kernel]; }
  // Device address of weight `i` (256-aligned inside the single weights allocation).
  cu::CUdeviceptr weight_address(size_t i) const { return weights_base_ + weight_offsets_[i]; }
  // Makes the model's (primary) context current on the calling thread.
  void make_current() const;

 private:
  Model() = default;
  void open_device();   // the driver, the device and its primary context (no bundle needed)
  void check_device();  // the device against the manifest's needs
  void load_bundle(const std::string& path, const std::string& weights_path, Verify verify,
                   LoadTrace& trace);
  // The device half of a load, while the weights stream: check, allocate, open the upload,
  // load the cubins.
  void start_device(const Bundle& b, DeviceUpload& upload, LoadTrace& trace);
  void load_modules(const std::vector<ByteRange>& kernel_cubins);
  void allocate_weights(const WeightSource& weights);  // one allocation, offsets 256-aligned

  Manifest manifest_;
  int ordinal_ = 0;
  cu::CUdevice dev_ = 0;
  cu::CUcontext ctx_ = nullptr;
  std::vector<cu::CUmodule> modules_;  // every module loaded (unloaded with the model)
  std::vector<cu::CUfunction> functions_;  // by kernel index
  cu::CUdeviceptr weights_base_ = 0;
  std::vector<uint64_t> weight_offsets_;
};

}  // namespace aotpack
