// Calls into user code (kernels, orchestrations) so that a fault inside it
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) or a C++ exception becomes an
// error instead of ending the process. The handler acts only on a thread
// that is inside a guarded call; any other fault goes to the handler that
// was installed before ours (Python's faulthandler, or the default action).
// A faulting kernel may leave its own state broken; the runtime's is not.
#pragma once

#include <string>

namespace simpler {

// Installs the handlers (again if something replaced them). Cheap to repeat.
void install_fault_handlers();

// Gives the calling thread an alternate signal stack, so a kernel that
// overflows its stack is still reported.
void prepare_thread_for_faults();

// Runs fn(arg). Returns false with a description ("SIGSEGV (address 0x10)",
// "C++ exception: ...") when it faulted or threw.
bool guarded_call(void (*fn)(void*), void* arg, std::string* what);

}  // namespace simpler
