// The ember driver: a simulated accelerator behind a small C API.
//
// This layer knows nothing about PyTorch. It plays the part of a vendor's
// driver library (think libcudart): PyTorch integration code sits on top of
// it and every call into it is checked. The host cannot touch device memory:
// the addresses emMalloc returns lie in pages mapped with no access, so a host
// dereference of a device pointer faults exactly as it would on real
// hardware. The same memory is mapped a second time, read/write, at a fixed
// offset that only the driver's copies and kernels use (emGetKernelOffset):
// kernels run at full speed, and no protection changes per call.
//
// Work is ordered on streams (in-order queues, each run by a worker thread,
// started when the stream first gets asynchronous work): see "Streams" at the
// end of this file.
//
// This header is the driver's whole public face: code above the driver
// (csrc/runtime, csrc/aten, the book) includes it and nothing else from this
// folder. The implementation is one file per area, named after it (device,
// memory, vmm, launch, stream, event, graph, link, tracer; error and fork),
// sharing state through the private internal.h. Its test, a plain C++
// program, is tests/package/driver/.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emError {
  emSuccess = 0,
  emErrorInvalidDevice = 1,   // device index out of range
  emErrorInvalidValue = 2,    // null pointer, unknown pointer, bad size
  emErrorMemoryAllocation = 3, // the device (or the host mapping) is full
  emErrorStreamCapture = 4,    // not allowed while a stream captures a graph
  emErrorLaunchFailure = 5     // an asynchronous kernel failed (emKernelFail)
} emError_t;

typedef enum emMemcpyKind {
  emMemcpyHostToDevice = 0,
  emMemcpyDeviceToHost = 1,
  emMemcpyDeviceToDevice = 2
} emMemcpyKind;

// Per-device memory statistics, in bytes and counts.
typedef struct emMemStats {
  size_t bytes_in_use;      // sum of live allocation sizes (as requested)
  size_t peak_bytes_in_use; // high-water mark of bytes_in_use since reset
  size_t live_allocations;  // number of live allocations
  size_t total_allocations; // emMalloc calls that succeeded, ever
  size_t total_frees;       // emFree calls that succeeded, ever
} emMemStats;

const char* emGetErrorString(emError_t error);
// What exactly was wrong in this thread's latest call, if it returned `error`
// ("" otherwise, and if the driver has nothing to add): for
// emErrorInvalidDevice, the index and the valid range.
const char* emGetErrorDetail(emError_t error);

// Devices. The simulated machine has two ember devices, 0 and 1. The current
// device is per host thread and starts at 0.
emError_t emGetDeviceCount(int* count);
emError_t emGetDevice(int* device);
emError_t emSetDevice(int device);
// Waits until all work issued to `device` has finished.
emError_t emDeviceSynchronize(int device);

// Memory. emMalloc allocates on the current device (page-aligned; size 0
// yields nullptr). It fails with emErrorMemoryAllocation when the device's
// 4 GiB (EMBER_DEVICE_MEMORY_BYTES, read once) hold no free range that large.
// emFree returns the pages to the OS; emFree(nullptr) is a no-op.
// emPointerGetDevice tells which device owns a pointer returned by emMalloc
// (or a pointer inside such an allocation).
emError_t emMalloc(void** ptr, size_t size);
emError_t emFree(void* ptr);
emError_t emPointerGetDevice(const void* ptr, int* device);

// Copies between host and device memory, or between two device buffers (on
// the same or different devices). Synchronous.
emError_t emMemcpy(void* dst, const void* src, size_t count, emMemcpyKind kind);

// Runs fn(arg) "on the device": this is how kernels execute. `buffers` lists
// every allocation fn touches (interior pointers and nullptr are fine); their
// memory is not reused before fn returns, even if freed. fn reaches device
// address p at (char*)p + emGetKernelOffset's offset: p itself faults.
emError_t emLaunchKernel(
    void (*fn)(void* arg),
    void* arg,
    void* const* buffers,
    size_t num_buffers);

// Inside a kernel (on the thread running fn, not on threads fn starts): the
// offset at which the kernel reads and writes device memory, the same for all
// devices. Outside a kernel: emErrorInvalidValue.
emError_t emGetKernelOffset(ptrdiff_t* offset);

// emLaunchKernel for a kernel that can also be recorded in a graph: while
// the current stream captures, the driver calls clone(arg) for a heap copy
// of the argument that owns everything fn needs (copies of tensors and
// scalars, never references into the caller's stack), records fn with it,
// and frees it with destroy(copy) when the graph goes. Otherwise fn(arg)
// runs now, exactly as emLaunchKernel, and clone is never called: the
// eager path allocates nothing more.
emError_t emLaunchKernelRecordable(
    void (*fn)(void* arg),
    void* arg,
    void* (*clone)(const void* arg),
    void (*destroy)(void* copy),
    void* const* buffers,
    size_t num_buffers);

emError_t emMemGetStats(int device, emMemStats* stats);
emError_t emMemResetPeak(int device);

// Event callbacks: tools (the book's dispatch trace, a profiler) can watch
// what the driver does. One callback per process; it is called on the thread
// that made the driver call, after the work succeeded, and never while the
// driver holds its internal lock, so the callback may call back into the
// driver. Failed calls and no-ops (emMalloc of 0 bytes, emFree(NULL), a copy
// of 0 bytes) report nothing. Asynchronous work is reported when it is queued
// (on the host thread that queued it), not when a worker runs it:
// emMemcpyAsync as emEventMemcpy, emLaunchKernelAsync as emEventKernelLaunch,
// both with `async` set.
//
// Kinds 0..3 are reported from the start. The stream kinds (4 and up) are
// reported only once a tool enables them (emSetEventKindEnabled), so that a
// tool written before they existed never sees a kind it does not know.

// Stream and sync event ids (the stream API is declared after this section).
typedef int64_t emStream_t;
typedef int64_t emSyncEvent_t;

typedef enum emEventKind {
  emEventMalloc = 0,
  emEventFree = 1,
  emEventMemcpy = 2,
  emEventKernelLaunch = 3,
  emEventSleep = 4,             // emSleepAsync: `microseconds`
  emEventSyncEventRecord = 5,   // emSyncEventRecord: `sync_event`
  emEventStreamWaitSyncEvent = 6 // emStreamWaitSyncEvent: `sync_event`,
                                 // peer_device = the event's device
} emEventKind;

typedef struct emEvent {
  emEventKind kind;
  // malloc/free: the allocation's device. memcpy: the device side of the
  // copy (H2D: destination, D2H: source, D2D: destination). launch: the
  // device it runs on (emLaunchKernel: the launching thread's current one).
  int device;
  // D2D memcpy: the source device. Otherwise -1.
  int peer_device;
  emMemcpyKind memcpy_kind; // memcpy only
  size_t bytes;             // malloc/free: size as requested; memcpy: count
  size_t num_buffers;       // launch only: buffers handed to the kernel
  const void* ptr;          // malloc/free: the allocation; memcpy: dst
  // Added with streams (after the older fields, so tools built against the
  // older header keep reading those correctly):
  emStream_t stream;        // memcpy/launch/stream kinds: the stream's id
                            // (on `device`, except for an emMemcpyAsync
                            // queued on another device's stream); else 0
  int async;                // 1: queued, runs later (emMemcpyAsync,
                            // emLaunchKernelAsync, the stream kinds); 0:
                            // done when reported
  uint64_t microseconds;    // sleep only
  emSyncEvent_t sync_event; // event record/wait only; otherwise 0
} emEvent;

typedef void (*emEventCallback)(const emEvent* event, void* user);

// Installs `callback` (NULL removes it); `user` is passed back to it. A call
// already running the previous callback on another thread may finish after
// this returns, so a callback must stay valid for the life of the process.
emError_t emSetEventCallback(emEventCallback callback, void* user);

// Turns reporting of one kind on (enabled != 0) or off, for the process.
// Kinds 0..3 start on, the stream kinds off. An unknown kind:
// emErrorInvalidValue.
emError_t emSetEventKindEnabled(emEventKind kind, int enabled);

// Activity records: what a profiler needs (CUPTI's activity API in small).
// The event callback above says what was asked, when it was asked; an
// activity says when the device did it. While an activity callback is
// installed, the driver times each kernel (emLaunchKernel, by value, and
// emLaunchKernelAsync when its stream's worker runs it), each copy (emMemcpy, and an emMemcpyAsync when its stream's worker runs it),
// each emSleepAsync and each sync event record (when its stream reaches it:
// start == end), and reports it once done, on the thread that did it (a
// worker's, for asynchronous work), with no driver lock held. Times are
// wall clock, in nanoseconds since the Unix epoch (what profilers put on one
// time line).
// With no activity callback installed, the cost is one atomic load per call.
//
// Correlation: a tool pushes its own id (an operator's) on the calling
// thread's stack; each activity carries the innermost id of the thread that
// issued it, taken when the work was issued (for asynchronous work: queued).
// A graph replay (emGraphLaunch) reports each kernel it runs, under the name
// its launch had when captured.
typedef enum emActivityKind {
  emActivityKernel = 0,
  emActivityMemcpy = 1,
  emActivitySleep = 2,
  emActivitySyncEventRecord = 3
} emActivityKind;

typedef struct emActivity {
  emActivityKind kind;
  int device;               // the device it ran on (memcpy: as for emEvent)
  emStream_t stream;        // the stream it ran in order on
  uint64_t start_ns;        // the device work
  uint64_t end_ns;
  uint64_t issue_start_ns;  // the host call that issued it (a synchronous
  uint64_t issue_end_ns;    // call spans its work, and its wait before)
  uint64_t issue_thread;    // the issuing thread's system id (gettid)
  uint64_t correlation_id;  // innermost pushed id at the issue; 0: none
  const char* name;         // kernel: its emSetNextLaunchName, else NULL;
                            // valid during the callback only
  emMemcpyKind memcpy_kind; // memcpy only
  size_t bytes;             // memcpy only
  int async;                // 1: queued work (all but emMemcpy and the
                            // kernels of emLaunchKernel, by value, graphs)
  emSyncEvent_t sync_event; // event record only
  int64_t graph;            // a kernel of an emGraphLaunch: its emGraph_t;
                            // else 0
} emActivity;

typedef void (*emActivityCallback)(const emActivity* activity, void* user);

// Installs `callback` (NULL removes it and stops the timing). As with the
// event callback, a call already running the old one may finish later.
emError_t emSetActivityCallback(emActivityCallback callback, void* user);
// The calling thread's correlation stack. Pop of an empty stack:
// emErrorInvalidValue. `id` may be NULL.
emError_t emActivityPushCorrelationId(uint64_t id);
emError_t emActivityPopCorrelationId(uint64_t* id);
// Names the calling thread's next kernel launch in its activity record
// (e.g. a generated kernel's name). The next emLaunchKernel,
// emLaunchKernelByValue or emLaunchKernelAsync takes it, whether or not it
// succeeds; `name` must stay valid until then (emLaunchKernelAsync copies
// it). NULL: unnamed.
emError_t emSetNextLaunchName(const char* name);

// ---------------------------------------------------------------------------
// Streams. A stream is an in-order queue of device work on one device, named
// by the pair (device, id): id 0 is the device's default stream (it always
// exists), other ids come from emStreamCreate, are unique in the process
// (never reused) and belong to the device they were created on. Streams live
// as long as the process (there is no destroy, as with PyTorch's stream
// pools). Each stream's queue is run by its own worker thread, asynchronously
// to the host: different streams run concurrently, and only events
// (emStreamWaitSyncEvent) or the host (synchronize) order one against another.
// A worker starts when its stream first gets asynchronous work and blocks on
// a condition variable when idle (it never spins).
//
// Kernels and synchronous copies keep their contracts (fn and the copy run on
// the calling thread and are done when the call returns) but take their place
// in stream order. emLaunchKernel runs on the current device's current stream
// (emGetStream): it first waits until the work queued on that stream before
// it has finished, and the stream's worker starts nothing queued later until
// fn has returned. emMemcpy does the same on the current stream of each
// device it touches (H2D: the destination's device, D2H: the source's, D2D:
// both). A launch or copy from inside a kernel runs at once (the enclosing
// launch has already waited). emDeviceSynchronize waits for everything queued
// on any stream of the device before the call.
//
// Every call taking (device, stream) fails with emErrorInvalidDevice for a bad
// device, and with emErrorInvalidValue for an id that no emStreamCreate
// returned ("stream 9 does not exist") or that belongs to another device
// ("stream 5 belongs to device 1, not device 0"); emGetErrorDetail says which
// (for these calls it explains every emErrorInvalidValue it can).
//
// Waiting calls (synchronize of a stream, an event or a device) fail with
// emErrorInvalidValue when made inside a kernel: the kernel's own stream
// cannot finish before the kernel does.
//
// fork(): the parent first waits until every stream's queued work is done
// (work held back by a kernel running on the forking thread excepted), so the
// child's copy of device memory is consistent. The child starts with no
// worker threads; one starts when the child first queues work on a stream.
// ---------------------------------------------------------------------------

// Creates a stream on `device`; *stream gets its id (> 0). At most 1024
// streams per device (emErrorMemoryAllocation after that).
emError_t emStreamCreate(int device, emStream_t* stream);
// *idle = 1 if everything queued on the stream has finished and no kernel
// runs on it, else 0. Does not wait.
emError_t emStreamQuery(int device, emStream_t stream, int* idle);
// Waits until everything queued on the stream before the call has finished.
emError_t emStreamSynchronize(int device, emStream_t stream);

// The current stream, per host thread and device (like the current device):
// where emLaunchKernel and emMemcpy run. A new thread starts with stream 0 on
// every device. Setting it does not change the current device.
emError_t emGetStream(int device, emStream_t* stream);
emError_t emSetStream(int device, emStream_t stream);

// Asynchronous work: queued on (device, stream), returns at once; the
// stream's worker does it after the stream's earlier work. Returns
// emErrorInvalidValue (nothing queued) for arguments emMemcpy would reject.
//
// emMemcpyAsync: emMemcpy's copy, on a stream of any device. Device memory
// freed before the copy runs is not reused until it has run (as for
// kernels). Host memory is read (H2D) or written (D2H) when the copy runs:
// it must stay valid, and unchanged or unread, until then (a synchronize or
// an event says when), as with pinned memory on a real device.
emError_t emMemcpyAsync(void* dst, const void* src, size_t count,
                        emMemcpyKind kind, int device, emStream_t stream);
// Keeps the stream busy for `microseconds` (like torch.cuda._sleep): later
// work on it waits that long. The simulated device does not burn a host
// core for it (its worker sleeps). What makes races and timing observable.
emError_t emSleepAsync(uint64_t microseconds, int device, emStream_t stream);

// ---------------------------------------------------------------------------
// Sync events (named so to stay apart from emEvent, the trace callback's
// record above): markers recorded into a stream. An event belongs to the
// device it was created on and is named by a process-unique id (> 0, never
// reused; 0 is never an event). Calls on an id that emSyncEventCreate never
// returned, or that was destroyed, fail with emErrorInvalidValue.
// ---------------------------------------------------------------------------

typedef enum emSyncEventFlags {
  emSyncEventDefault = 0,       // records a timestamp
  emSyncEventDisableTiming = 1  // no timestamp: emSyncEventElapsedTime fails
} emSyncEventFlags;

emError_t emSyncEventCreate(int device, emSyncEvent_t* event,
                            unsigned int flags);
// Work already queued that refers to the event (a record, a wait) still
// happens; only the id stops being valid.
emError_t emSyncEventDestroy(emSyncEvent_t event);
// Queues the event on (device, stream), which must be of the event's device
// (emErrorInvalidValue otherwise). The event completes when the stream's
// worker reaches it (at once if the stream is idle), and takes the time then.
// Recording again re-arms it: query, synchronize, waits and elapsed time
// refer to the latest record made before they are called.
emError_t emSyncEventRecord(emSyncEvent_t event, int device, emStream_t stream);
// *done = 1 if the latest record has completed, else 0. Does not wait.
// Never recorded: emErrorInvalidValue ("event 3 has never been recorded").
emError_t emSyncEventQuery(emSyncEvent_t event, int* done);
// The host waits until the latest record has completed. Never recorded:
// emErrorInvalidValue (no hang).
emError_t emSyncEventSynchronize(emSyncEvent_t event);
// Work queued on (device, stream) after this call waits until the event's
// latest record (made before this call) has completed. The event may be of
// another device. Never recorded: emErrorInvalidValue. Returns at once.
emError_t emStreamWaitSyncEvent(int device, emStream_t stream,
                                emSyncEvent_t event);
// *ms = end's timestamp - start's, in milliseconds (negative if end completed
// first). Both must be of one device, have timing, and have completed their
// latest records; emErrorInvalidValue, with the detail, if one was never
// recorded, is still pending, has no timing, or the devices differ.
emError_t emSyncEventElapsedTime(float* ms, emSyncEvent_t start,
                                 emSyncEvent_t end);

// ---------------------------------------------------------------------------
// Capacity, for a caching allocator above the driver and for
// torch.accelerator.get_memory_info: like cudaMemGetInfo, *total = the
// device's capacity (4 GiB unless EMBER_DEVICE_MEMORY_BYTES says otherwise),
// *free = the bytes of it that no allocation holds (memory that queued work
// still uses counts as held). Free bytes may be fragmented: one emMalloc of
// that size is not promised to fit.
// ---------------------------------------------------------------------------
emError_t emMemGetInfo(int device, size_t* free, size_t* total);

// ---------------------------------------------------------------------------
// Graphs: work captured from a stream, replayed with one call (CUDA graphs).
//
// Between emStreamBeginCapture and emStreamEndCapture, the stream runs
// nothing: each emLaunchKernelByValue or emLaunchKernelRecordable on it (as
// the current stream) is recorded instead, with a copy of its argument, and replayed by
// emGraphLaunch on the same buffers. A launch whose argument the driver
// cannot copy (emLaunchKernel: its fn reads the caller's stack), and every
// call that would wait for the capturing stream or run work on it now (a
// synchronous copy, a synchronize, an asynchronous copy, sleep or event), fails
// with emErrorStreamCapture and invalidates the capture: emStreamEndCapture
// then fails too, naming the call. A graph keeps the device memory its kernels
// use: memory freed after the capture is not handed out again by the driver
// until the graph is destroyed.
// ---------------------------------------------------------------------------
typedef int64_t emGraph_t;

emError_t emStreamBeginCapture(int device, emStream_t stream);
// CUDA's capture modes, for the one "potentially unsafe" call ember has: a
// device synchronize (emDeviceSynchronize), which waits for every stream of
// the device, the capturing one included. Global (emStreamBeginCapture's):
// a device synchronize from any thread fails and invalidates the capture.
// ThreadLocal: only from the thread that began the capture; other threads'
// synchronize waits for the device's other streams. Relaxed: allowed from
// every thread (a capturing stream runs nothing, so there is nothing of it
// to wait for). Calls that act on the capturing stream itself (its
// synchronize, a synchronous copy on it, an unrecordable launch) inherently
// conflict with the capture and fail in every mode.
typedef enum emStreamCaptureMode {
  emStreamCaptureModeGlobal = 0,
  emStreamCaptureModeThreadLocal = 1,
  emStreamCaptureModeRelaxed = 2,
} emStreamCaptureMode;
emError_t emStreamBeginCaptureWithMode(int device, emStream_t stream,
                                       emStreamCaptureMode mode);
// Ends the capture; *graph gets the new graph (> 0), even with no work in it.
emError_t emStreamEndCapture(int device, emStream_t stream, emGraph_t* graph);
// *capturing = 1 while (device, stream) captures, else 0.
emError_t emStreamIsCapturing(int device, emStream_t stream, int* capturing);
// emLaunchKernel with an argument of `arg_size` bytes that the driver copies
// first: fn gets the copy. On a capturing stream the launch is recorded, not
// run. Nested in a running kernel, it runs at once.
emError_t emLaunchKernelByValue(
    void (*fn)(void* arg),
    const void* arg,
    size_t arg_size,
    void* const* buffers,
    size_t num_buffers);
// Runs the graph's kernels, in capture order, on (device, stream), which must
// be of the graph's device: in stream order, as one launch does.
emError_t emGraphLaunch(emGraph_t graph, int device, emStream_t stream);
// *count = the kernels the graph holds.
emError_t emGraphGetNodeCount(emGraph_t graph, size_t* count);
emError_t emGraphDestroy(emGraph_t graph);

// ---------------------------------------------------------------------------
// Address reservations (CUDA's cuMemAddressReserve and cuMemMap, simpler):
// how an allocator grows a segment in place. A reservation is a range of the
// current device's address space that holds no memory; pages of the device
// are mapped into it, and unmapped, as the segment grows and shrinks. Sizes
// and addresses are multiples of emMemGetGranularity's page size.
//
// emMemAddressReserve takes `size` bytes of address space (each device has
// room for reservations of 8 times its capacity in all); nothing is
// committed, so emMemGetInfo and the stats do not change, and kernels and
// copies refuse its addresses until pages are mapped there.
// emMemMap commits the pages of [ptr, ptr + size), which must lie in one
// reservation and have no page mapped yet: emErrorMemoryAllocation if the
// device has fewer free bytes (they need not be contiguous). Mapped pages
// count in emMemGetInfo and in bytes_in_use (not in the allocation counts),
// and kernels and copies use them like allocated memory, also across
// ranges mapped by separate calls.
// emMemUnmap returns the pages of [ptr, ptr + size) to the OS: the range
// must be wholly mapped, without cutting through what one emMemMap mapped,
// and no queued work or graph may still use it (synchronize first).
// emMemAddressFree releases a reservation (by its base) with no page mapped.
// emFree refuses mapped pages. The details say what was wrong.
// ---------------------------------------------------------------------------
emError_t emMemGetGranularity(size_t* granularity);
emError_t emMemAddressReserve(void** ptr, size_t size);
emError_t emMemAddressFree(void* ptr);
emError_t emMemMap(void* ptr, size_t size);
emError_t emMemUnmap(void* ptr, size_t size);

// ---------------------------------------------------------------------------
// Asynchronous kernels, their failures, and links between processes: what a
// collective-communication backend (eccl) needs from the device.
// ---------------------------------------------------------------------------

// Queues fn(arg) on (device, stream) and returns at once: the stream's worker
// runs fn after the stream's earlier work, as a kernel (emGetKernelOffset works
// in fn, waiting calls are refused there, and nested launches run at once on the
// worker). `buffers` as for emLaunchKernel: kept from reuse until fn returns.
// On success fn is called exactly once, and owns arg; on failure it is never called.
emError_t emLaunchKernelAsync(void (*fn)(void* arg), void* arg,
                              void* const* buffers, size_t num_buffers,
                              int device, emStream_t stream);

// Inside a kernel run by a stream's worker (emLaunchKernelAsync): the kernel
// failed, for the reason `detail`. The failure is sticky, as a real device's
// asynchronous errors are: from then on emStreamSynchronize of that stream,
// emDeviceSynchronize of its device, emSyncEventSynchronize of an event recorded
// on it after the failure, and any kernel or synchronous copy in order on it
// (they do not run) return emErrorLaunchFailure, emGetErrorDetail saying
// "<detail>". A stream that waits on such an event (emStreamWaitSyncEvent) takes
// the same failure when its worker reaches the wait. Queued asynchronous work
// still runs (fn must be called once, it owns arg). Outside a worker's kernel:
// emErrorInvalidValue.
emError_t emKernelFail(const char* detail);

// Links: device memory shared between processes on one machine, as peer access
// or NVLink joins real devices. A link is a named POSIX shared-memory object
// that each process maps into the current device's address space: kernels and
// copies use it as they use memory from emMalloc (buffers of a launch may name
// it), and what a kernel of one process writes there, a kernel of another
// process reads. It does not count in the device's memory stats or capacity.
// emLinkOpen with create = 1 makes the object (`name` must not exist: the detail
// says so), sized `size` bytes and zero-filled; with create = 0 it opens an existing one, which
// must have exactly `size` bytes. *ptr gets its device address (page-aligned).
// emLinkUnlink removes the name (mappings stay valid; once every process has
// opened the link, removing the name leaves nothing behind when they exit).
// emLinkClose unmaps it (no queued work may still use it).
emError_t emLinkOpen(const char* name, size_t size, int create, void** ptr);
emError_t emLinkUnlink(const char* name);
emError_t emLinkClose(void* ptr);

#ifdef __cplusplus
} // extern "C"
#endif
