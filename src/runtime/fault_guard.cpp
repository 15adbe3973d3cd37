#include "runtime/fault_guard.h"

#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

namespace simpler {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

thread_local sigjmp_buf* t_jump = nullptr;
thread_local int t_signal = 0;
thread_local void* t_address = nullptr;

struct sigaction g_previous[NSIG];
std::mutex g_install_mu;

void on_fault(int sig, siginfo_t* info, void* ucontext) {
  if (sigjmp_buf* j = t_jump) {
    t_jump = nullptr;
    t_signal = sig;
    t_address = info ? info->si_addr : nullptr;
    siglongjmp(*j, 1);
  }
  // Not a guarded call: behave as if we were not here.
  const struct sigaction& p = g_previous[sig];
  if ((p.sa_flags & SA_SIGINFO) && p.sa_sigaction) {
    p.sa_sigaction(sig, info, ucontext);
  } else if (p.sa_handler == SIG_IGN) {
    return;
  } else if (p.sa_handler != SIG_DFL && p.sa_handler) {
    p.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

bool ours(int sig) {
  struct sigaction cur;
  sigaction(sig, nullptr, &cur);
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault;
}

}  // namespace

void install_fault_handlers() {
  std::lock_guard<std::mutex> lk(g_install_mu);
  for (int sig : kSignals) {
    if (ours(sig)) continue;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, &g_previous[sig]);
  }
}

void prepare_thread_for_faults() {
  static thread_local char* alt = nullptr;
  if (alt) return;
  const size_t size = 64 * 1024;
  alt = static_cast<char*>(std::malloc(size));
  if (!alt) return;
  stack_t ss;
  ss.ss_sp = alt;
  ss.ss_size = size;
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
}

bool guarded_call(void (*fn)(void*), void* arg, std::string* what) {
  sigjmp_buf jump;
  sigjmp_buf* volatile saved = t_jump;  // nested guarded calls restore the outer one
  if (sigsetjmp(jump, 1) != 0) {
    t_jump = saved;
    char buf[128];
    const char* name = t_signal == SIGSEGV   ? "SIGSEGV (invalid memory access)"
                       : t_signal == SIGBUS  ? "SIGBUS (bus error)"
                       : t_signal == SIGFPE  ? "SIGFPE (arithmetic fault)"
                       : t_signal == SIGILL  ? "SIGILL (illegal instruction)"
                       : t_signal == SIGABRT ? "SIGABRT (abort)"
                                             : "a fatal signal";
    if (t_signal == SIGABRT)
      std::snprintf(buf, sizeof buf, "%s", name);
    else
      std::snprintf(buf, sizeof buf, "%s at address %p", name, t_address);
    *what = buf;
    return false;
  }
  t_jump = &jump;
  try {
    fn(arg);
  } catch (const std::exception& e) {
    t_jump = saved;
    *what = std::string("C++ exception: ") + e.what();
    return false;
  } catch (...) {
    t_jump = saved;
    *what = "an unknown C++ exception";
    return false;
  }
  t_jump = saved;
  return true;
}

}  // namespace simpler
