// The device's name in C++: c10's, shared with Python.
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

// ember-book: begin backend_name
namespace ember {

// The name lives in c10, where C++ reads it: c10::Device("ember:1") parses,
// DeviceTypeName(PrivateUse1) and every device in a message print "ember".
// Registering it while the library loads names the device before any Python
// runs, so nothing can ask for a name first and keep "privateuseone" (see the
// type strings). c10 accepts the same name twice (Python's rename does it
// again) and refuses another; a throw here, while the library loads, would end
// the process, so a name already taken is a warning and ember answers to it.
struct RegisterBackendName {
  RegisterBackendName() {
    if (!c10::is_privateuse1_backend_registered()) {
      c10::register_privateuse1_backend("ember");
    } else if (c10::get_privateuse1_backend() != "ember") {
      TORCH_WARN("ember: PrivateUse1 is already named \"",
                 c10::get_privateuse1_backend(),
                 "\" in this process; ember's devices go by that name");
    }
  }
};

RegisterBackendName register_backend_name;

} // namespace ember
// ember-book: end backend_name
