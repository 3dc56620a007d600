// Earlier versions of parts that the allocator chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin device_guard.v1
@@ -1,2 +0,0 @@ sha256:5d4b6b2954
@@ -5,9 +2,0 @@ sha256:1dd130f7fe
@@ -15,4 +4,3 @@ sha256:302fff14b4
+// whenever it reads or switches the current ember device: every
+// c10::DeviceGuard, the storage constructor, later our kernels. The current
+// device itself lives in the driver, per host thread, as in CUDA.
@@ -63,4 +51,2 @@ sha256:782e7e0af9
+  // Streams come in chapter 11. Until then every device has one stream, the
+  // default one, and work on it is synchronous.
@@ -68,4 +54,1 @@ sha256:46e5be52e1
+    return c10::Stream(c10::Stream::DEFAULT, device);
@@ -74,3 +57,2 @@ sha256:1f912b7d0b
+  c10::Stream exchangeStream(c10::Stream stream) const override {
+    return c10::Stream(c10::Stream::DEFAULT, stream.device());
@@ -79,39 +61,1 @@ sha256:f7d912ee82
+  // torch.accelerator.synchronize() and torch.<device>.synchronize() end here.
@@ -120,84 +63,0 @@ sha256:8809bbcab9
// ember-book: end device_guard.v1

// ember-book: begin allocator.v1
@@ -1,2 +0,0 @@ sha256:5d4b6b2954
@@ -5,18 +3,7 @@ sha256:a41957013e
+// DataPtr keeps a plain function pointer as the deleter. It runs inside
+// destructors, so it must not throw: a failed free is reported, not raised.
+void deleteDeviceMemory(void* ptr) {
+  const emError_t error = emFree(ptr);
+  if (error != emSuccess) {
+    TORCH_WARN("ember: freeing device memory at ", ptr, " failed: ",
+               emGetErrorString(error));
@@ -26,23 +13,4 @@ sha256:e3e5e2a2ba
+struct EmberAllocator final : public c10::Allocator {
+  // Allocates on the current device. Code that wants memory on a given
+  // device makes it current first with a device guard (PyTorch's storage
+  // constructor does; our kernels will).
@@ -50,1 +17,0 @@ sha256:3aa464b724
@@ -53,4 +20,11 @@ sha256:7e6f684c87
+    void* ptr = nullptr;
+    const emError_t error = emMalloc(&ptr, nbytes); // 0 bytes gives nullptr
+    if (error == emErrorMemoryAllocation) {
+      // Running out of memory is an error programs handle (smaller batch,
+      // empty a cache), so raise torch.OutOfMemoryError as CUDA does.
+      emMemStats stats{};
+      EMBER_CHECK(emMemGetStats(device, &stats));
+      TORCH_CHECK_WITH(OutOfMemoryError, false,
+                       "ember out of memory: tried to allocate ", nbytes,
+                       " bytes on ember device ", device, ", which has ",
+                       stats.bytes_in_use, " bytes in use");
@@ -58,7 +32,5 @@ sha256:4d4087ad93
+    EMBER_CHECK(error);
+    // The context is the pointer itself: the deleter needs nothing else.
+    return {ptr, ptr, &deleteDeviceMemory,
+            c10::Device(c10::DeviceType::PrivateUse1,
+                        static_cast<c10::DeviceIndex>(device))};
@@ -67,22 +39,4 @@ sha256:2c79dd29e6
+  // The context is the pointer and the deleter is a plain function, so
+  // PyTorch may use raw_allocate()/raw_deallocate() with this allocator.
+  c10::DeleterFnPtr raw_deleter() const override {
+    return &deleteDeviceMemory;
@@ -91,6 +45,2 @@ sha256:a805d84a75
+  // Allocator::clone() copies through this. The default (std::memcpy on
+  // the host) would fault on ember memory: the driver must do the copy.
@@ -101,49 +50,0 @@ sha256:33a4969b10
@@ -152,12 +53,4 @@ sha256:1341063074
+// One allocator for all ember devices: allocate() reads the current device.
+// Registered with priority 0 (the default).
+static EmberAllocator ember_allocator;
+REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &ember_allocator);
@@ -166,5 +58,0 @@ sha256:93ddbb6497
// ember-book: end allocator.v1
