// Earlier versions of parts that the device_guard chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin allocator.v2
@@ -16,2 +15,0 @@ sha256:a742efb1f5
@@ -62,1 +60,1 @@ sha256:6c4cb393a4
+    void* ptr = cacheAllocate(nbytes, device, stream);
@@ -108,3 +106,1 @@ sha256:38470a884e
+  // Memory pools (CUDA graphs' private pools) do not exist here: one cache.
// ember-book: end allocator.v2

// ember-book: begin device_cache.v1
@@ -40,2 +39,0 @@ sha256:2f87b81ed1
@@ -59,2 +56,0 @@ sha256:27635d9374
@@ -74,8 +69,0 @@ sha256:c81c29f908
@@ -87,1 +74,0 @@ sha256:e34fabbbcb
@@ -99,3 +86,1 @@ sha256:5fa0b14055
+    if (it != pool.end() && (*it)->stream == stream) {
@@ -107,2 +91,0 @@ sha256:3e18a1ef0f
@@ -121,5 +103,0 @@ sha256:7493dc1c65
@@ -131,1 +108,0 @@ sha256:d92e98ffb4
@@ -145,5 +121,0 @@ sha256:e2a72febf4
@@ -191,1 +162,0 @@ sha256:d92e98ffb4
@@ -254,6 +224,0 @@ sha256:be0feaeab2
@@ -274,5 +238,0 @@ sha256:23f38bf579
@@ -285,5 +245,1 @@ sha256:7482a66e9d
+    if (block->small ? rest < kBlockRound : rest <= kMinLargeRemainder) {
@@ -294,4 +249,0 @@ sha256:f2ca4da851
@@ -313,2 +264,0 @@ sha256:f058109221
@@ -328,4 +277,0 @@ sha256:8af9a6f2ee
@@ -347,1 +292,0 @@ sha256:09f7ae7cec
@@ -384,5 +329,2 @@ sha256:25f6606637
+  // Every whole free segment goes back to the driver.
+  void releaseSegments(DeviceCache& cache) {
@@ -392,2 +334,1 @@ sha256:8756e56670
+        if (block->prev != nullptr || block->next != nullptr) {
@@ -400,3 +340,0 @@ sha256:fad3fb5754
@@ -406,2 +343,0 @@ sha256:bbad1c2fbe
@@ -410,144 +345,0 @@ sha256:55f3143fad
@@ -577,3 +368,0 @@ sha256:b0e4a42a67
// ember-book: end device_cache.v1

// ember-book: begin pinned_blocks.v1
@@ -1,1 +1,1 @@ sha256:c3c652d19d
+#include <ATen/core/CachingHostAllocator.h> // at::HostAllocator
@@ -10,4 +10,8 @@ sha256:e107164c95
+// returned. The simulated driver can copy any host memory, so "pinned" is
+// this allocator's promise: a block is not returned to the OS while a copy
+// queued on a stream still reads or writes it.
+struct PinnedBlock {
+  void* data;
+  size_t size;
+  std::vector<emSyncEvent_t> uses; // recorded after each queued copy
+};
@@ -15,3 +19,2 @@ sha256:495dfc23f8
+// Tensor.is_pinned() asks about any host pointer, also one inside a block.
+// Leaked on purpose: tensors may be freed after this library's statics.
@@ -22,3 +25,7 @@ sha256:2fb24fb592
+std::map<uintptr_t, PinnedBlock*>& pinnedBlocks() {
+  static auto* blocks = new std::map<uintptr_t, PinnedBlock*>;
+  return *blocks;
+}
+at::HostStats& pinnedStats() { // with pinnedMutex() held
+  static auto* stats = new at::HostStats;
+  return *stats;
@@ -27,2 +34,1 @@ sha256:e35c895423
+PinnedBlock* findPinned(const void* ptr) { // with pinnedMutex() held
@@ -30,4 +36,3 @@ sha256:a3f261f759
+  auto it = pinnedBlocks().upper_bound(address);
+  if (it == pinnedBlocks().begin()) {
+    return nullptr;
@@ -36,1 +41,1 @@ sha256:b38f0e0e1b
+  return address < it->first + it->second->size ? it->second : nullptr;
@@ -40,1 +45,2 @@ sha256:1b8f1a51ea
+  std::lock_guard<std::mutex> lock(pinnedMutex());
+  return findPinned(ptr) != nullptr;
// ember-book: end pinned_blocks.v1

// ember-book: begin pinned_allocator.v1
@@ -3,12 +3,17 @@ sha256:a3b22d0365
+// A non_blocking copy queued on (device, stream) uses the block holding
+// `ptr`: remember an event recorded after it. Events of copies that have
+// finished are dropped, so a block reused for many copies keeps few.
+void recordPinnedUse(const void* ptr, int device, emStream_t stream) {
+  emSyncEvent_t event = 0;
+  EMBER_CHECK(emSyncEventCreate(device, &event, emSyncEventDisableTiming));
+  EMBER_CHECK(emSyncEventRecord(event, device, stream));
+  std::lock_guard<std::mutex> lock(pinnedMutex());
+  PinnedBlock* block = findPinned(ptr);
+  TORCH_INTERNAL_ASSERT(block != nullptr, "ember: not pinned memory");
+  std::vector<emSyncEvent_t> pending{event};
+  for (const emSyncEvent_t use : block->uses) {
+    int done = 1;
+    if (emSyncEventQuery(use, &done) == emSuccess && done == 0) {
+      pending.push_back(use);
+    } else {
+      (void)emSyncEventDestroy(use);
@@ -16,2 +20,0 @@ sha256:25884c377a
@@ -19,5 +22,15 @@ sha256:6495c177ac
+  block->uses = std::move(pending);
+}
+
+// The deleter: wait for the copies still queued, then unmap. Never throws.
+void freePinned(void* context) {
+  auto* block = static_cast<PinnedBlock*>(context);
+  {
+    std::lock_guard<std::mutex> lock(pinnedMutex());
+    pinnedBlocks().erase(reinterpret_cast<uintptr_t>(block->data));
+    at::HostStats& stats = pinnedStats();
+    stats.active_requests.decrease(1);
+    stats.active_bytes.decrease(block->size);
+    stats.allocations.decrease(1);
+    stats.allocated_bytes.decrease(block->size);
+    stats.num_host_free += 1;
@@ -25,2 +38,3 @@ sha256:cab2aee40b
+  for (const emSyncEvent_t use : block->uses) {
+    (void)emSyncEventSynchronize(use);
+    (void)emSyncEventDestroy(use);
@@ -28,4 +42,31 @@ sha256:7041097f4e
+  munmap(block->data, block->size);
+  delete block;
+}
+
+// Registered as PrivateUse1's host allocator (at::getHostAllocator), which
+// PyTorch's generic code asks for pinned memory, stream uses and stats. It
+// caches nothing: a freed block goes back to the OS once its copies finish.
+struct PinnedAllocator final : public at::HostAllocator {
+  c10::DataPtr allocate(size_t nbytes) override {
+    if (nbytes == 0) {
+      return {nullptr, c10::Device(c10::DeviceType::CPU)};
+    }
+    // Whole pages of their own, so that no other allocation shares them.
+    void* data = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE,
+                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
+    TORCH_CHECK_WITH(OutOfMemoryError, data != MAP_FAILED,
+                     "ember: cannot allocate ", nbytes,
+                     " bytes of pinned host memory");
+    auto* block = new PinnedBlock{data, nbytes, {}};
+    {
+      std::lock_guard<std::mutex> lock(pinnedMutex());
+      pinnedBlocks()[reinterpret_cast<uintptr_t>(data)] = block;
+      at::HostStats& stats = pinnedStats();
+      stats.active_requests.increase(1);
+      stats.active_bytes.increase(nbytes);
+      stats.allocations.increase(1);
+      stats.allocated_bytes.increase(nbytes);
+      stats.num_host_alloc += 1;
+    }
+    // A CPU tensor's memory: the host reads it directly.
+    return {data, block, &freePinned, c10::Device(c10::DeviceType::CPU)};
@@ -34,15 +74,0 @@ sha256:e5f2f9a0ee
@@ -53,1 +79,2 @@ sha256:8ebb3bd1dd
+  // "This block is used by work queued on `stream`": it is not unmapped
+  // before that work has finished (our copy_ kernel records its own uses).
@@ -55,2 +82,25 @@ sha256:aaacb02dde
+    if (ctx == nullptr || stream.device_type() != c10::DeviceType::PrivateUse1) {
+      return false;
+    }
+    recordPinnedUse(ptr, stream.device_index(), stream.id());
+    return true;
+  }
+
+  void empty_cache() override {} // nothing is cached
+
+  at::HostStats get_stats() override {
+    std::lock_guard<std::mutex> lock(pinnedMutex());
+    return pinnedStats();
+  }
+  void reset_accumulated_stats() override {
+    std::lock_guard<std::mutex> lock(pinnedMutex());
+    for (c10::CachingAllocator::Stat* stat : counters(pinnedStats())) {
+      stat->reset_accumulated();
+    }
+    pinnedStats().num_host_alloc = pinnedStats().num_host_free = 0;
+  }
+  void reset_peak_stats() override {
+    std::lock_guard<std::mutex> lock(pinnedMutex());
+    for (c10::CachingAllocator::Stat* stat : counters(pinnedStats())) {
+      stat->reset_peak();
+    }
@@ -60,41 +110,3 @@ sha256:300ff5de33
+  static std::array<c10::CachingAllocator::Stat*, 4> counters(at::HostStats& s) {
+    return {&s.active_requests, &s.active_bytes, &s.allocations,
+            &s.allocated_bytes};
@@ -104,6 +115,0 @@ sha256:988f42f2ee
@@ -111,5 +117,2 @@ sha256:3115dad5f5
+  static PinnedAllocator allocator;
+  return allocator;
@@ -121,15 +124,3 @@ sha256:a605d7c8cb
+// PrivateUse1's host allocator while this library is loaded. The registry
+// keeps a plain pointer, so unloading clears it rather than leave it
+// dangling (getHostAllocator then says none is registered).
// ember-book: end pinned_allocator.v1

// ember-book: begin copy_non_blocking.v1
@@ -44,5 +44,1 @@ sha256:a6fb095c47
+  if (kind != emMemcpyDeviceToDevice) {
// ember-book: end copy_non_blocking.v1
