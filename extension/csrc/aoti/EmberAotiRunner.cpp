// AOTInductor's loader for packages compiled for ember.
//
// torch::inductor::AOTIModelPackageLoader (in Python, aoti_load_package) reads the
// package's device type ("AOTI_DEVICE_KEY": "ember") and creates the model runner
// registered under that name; PyTorch registers cpu, cuda, xpu and mps. This file
// registers ember's, when libtorch_ember.so is loaded: by `import torch_ember`, or
// by a C++ program (extension/runner/ember_aoti_runner.cpp).
//
// The generated model itself runs on the host, as the CPU's does: its kernels are
// C++ that launch on ember (kernel_entry.py), its ATen calls go through ember's C
// shim (EmberShim.cpp). AOTInductor's runtime parses the model's device from
// cpu, cuda, xpu or mps only, so ember's model is created as a CPU one; the
// generated code allocates its buffers on ember (PrivateUse1) regardless, and copies
// the weights to ember (torch_ember/compiler/aoti.py, onEmber).
// ember-book: begin aoti_runner
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <memory>
#include <string>

namespace {

class EmberModelRunner : public torch::inductor::AOTIModelContainerRunner {
 public:
  EmberModelRunner(const std::string& model_so_path, size_t num_models,
                   const std::string& device_str, const std::string& bin_dir,
                   bool run_single_threaded)
      : AOTIModelContainerRunner(model_so_path, num_models,
                                 hostDevice(device_str), bin_dir,
                                 run_single_threaded) {}

 private:
  // "ember" -> "cpu", "ember:1" -> "cpu:1": the index is the model's device index.
  static std::string hostDevice(const std::string& device_str) {
    const std::string prefix = "ember";
    TORCH_CHECK(device_str.rfind(prefix, 0) == 0,
                "ember: AOTInductor's ember model runner was asked for device '",
                device_str, "': it runs packages compiled for ember only");
    return "cpu" + device_str.substr(prefix.size());
  }
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> createEmberRunner(
    const std::string& model_so_path, size_t num_models,
    const std::string& device_str, const std::string& bin_dir,
    const bool run_single_threaded) {
  return std::make_unique<EmberModelRunner>(model_so_path, num_models,
                                            device_str, bin_dir,
                                            run_single_threaded);
}

const torch::inductor::RegisterAOTIModelRunner kRegisterEmberRunner(
    "ember", &createEmberRunner);

} // namespace
// ember-book: end aoti_runner
