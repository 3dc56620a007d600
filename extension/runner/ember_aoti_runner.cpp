// Runs an AOTInductor package compiled for ember, without Python.
//
//   ember_aoti_runner MODEL.pt2 SHAPE [SHAPE...]      (a shape: 5x8)
//
// Each input is a float tensor of that shape on ember holding
// (0, 1, ..., n-1) / n - 0.5, a value the caller rebuilds to run the same
// model eagerly. Prints each output's device, shape and values (%.9g), one
// line each, for the caller to compare.
//
// The program links libtorch (the loader, torch::inductor::AOTIModelPackageLoader)
// and ember's Python-free library, libtorch_ember.so, whose loading registers the
// "ember" device type, its kernels, allocator and guard, the package runner for
// the "ember" device key and the C shim the package calls (aoti_torch_ember_*).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

namespace {

// The kernels Inductor generated find ember's launcher through the environment,
// as "<pid>:<address>" (torch_ember/compiler/kernel_entry.py); Python's
// torch_ember publishes it at import, a C++ program does it itself.
void publishLauncher() {
  void* launcher = dlsym(RTLD_DEFAULT, "emberLaunchCompiled");
  TORCH_CHECK(launcher != nullptr,
              "ember: emberLaunchCompiled not found: is libtorch_ember.so linked?");
  std::ostringstream value;
  value << getpid() << ":" << reinterpret_cast<std::uintptr_t>(launcher);
  setenv("TORCH_EMBER_LAUNCH_COMPILED", value.str().c_str(), /*overwrite=*/1);
}

std::vector<int64_t> parseShape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, 'x')) {
    shape.push_back(std::stoll(part));
  }
  return shape;
}

at::Tensor makeInput(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t size : shape) {
    numel *= size;
  }
  at::Tensor host = at::arange(numel, at::kFloat).div_(numel).sub_(0.5);
  return host.reshape(shape).to(c10::Device("ember:0"));
}

void printOutput(const at::Tensor& output) {
  std::printf("device %s\nshape", output.device().str().c_str());
  for (int64_t size : output.sizes()) {
    std::printf(" %" PRId64, size);
  }
  at::Tensor host = output.to(at::kCPU, at::kDouble).contiguous();
  std::printf("\nvalues");
  const double* values = host.const_data_ptr<double>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    std::printf(" %.9g", values[i]);
  }
  std::printf("\n");
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.pt2 SHAPE [SHAPE...]\n", argv[0]);
    return 2;
  }
  try {
    publishLauncher();
    std::vector<at::Tensor> inputs;
    for (int i = 2; i < argc; ++i) {
      inputs.push_back(makeInput(parseShape(argv[i])));
    }
    torch::inductor::AOTIModelPackageLoader loader(argv[1]);
    for (const at::Tensor& output : loader.run(inputs)) {
      printOutput(output);
    }
  } catch (const c10::Error& error) {  // PyTorch's message, without its C++ stack
    std::fprintf(stderr, "ember_aoti_runner: %s: %s\n", argv[1],
                 error.what_without_backtrace());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ember_aoti_runner: %s: %s\n", argv[1], error.what());
    return 1;
  }
  return 0;
}
