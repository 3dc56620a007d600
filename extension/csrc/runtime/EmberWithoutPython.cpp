// libtorch_ember.so links no Python (setup.py): a C++ program loads it without
// an interpreter. One part of it asks Python something: the memory history
// (memory/EmberMemoryHistory.cpp) records Python frames when an interpreter
// runs on the allocating thread, and calls these three functions to find out.
//
// They are weak definitions here, answering "no interpreter". In a Python
// process the interpreter's own definitions come first in the symbol lookup
// (the executable and libpython are loaded before any extension) and win;
// in a C++ program these are the only ones, so the library loads and its
// memory history records C++ frames only.
extern "C" {

__attribute__((weak)) int Py_IsInitialized(void) {
  return 0;
}

__attribute__((weak)) int _Py_IsFinalizing(void) {
  return 0;
}

// PyThreadState* in Python's headers, which this file does not include.
__attribute__((weak)) void* PyGILState_GetThisThreadState(void) {
  return nullptr;
}

} // extern "C"
