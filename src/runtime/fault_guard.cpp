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

namespace {

// The calling thread's alternate signal stack while it lives: the stack that
// was in place before (a sanitizer's, a language runtime's, or none) is
// remembered, and put back and ours freed when the thread ends.
class AltStack {
 public:
  void install() {
    if (mem_) return;
    constexpr size_t kSize = 64 * 1024;
    char* mem = static_cast<char*>(std::malloc(kSize));
    if (!mem) return;
    stack_t ss;
    ss.ss_sp = mem;
    ss.ss_size = kSize;
    ss.ss_flags = 0;
    if (sigaltstack(&ss, &previous_) != 0) {
      std::free(mem);
      return;
    }
    mem_ = mem;
  }
  ~AltStack() {
    if (!mem_) return;
    stack_t cur;
    // Put the previous stack back only if ours is still the thread's (and
    // not in use); if something replaced ours, leave theirs alone.
    if (sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == mem_ && !(cur.ss_flags & SS_ONSTACK)) {
      stack_t back = previous_;
      if (back.ss_flags & SS_DISABLE) {
        back.ss_sp = nullptr;
        back.ss_size = 0;
        back.ss_flags = SS_DISABLE;
      } else {
        back.ss_flags = 0;
      }
      if (sigaltstack(&back, nullptr) != 0) return;  // cannot leave the thread without a valid stack: keep ours
    } else if (cur.ss_sp == mem_) {
      return;  // running on it: it must stay
    }
    std::free(mem_);
    mem_ = nullptr;
  }

 private:
  char* mem_ = nullptr;
  stack_t previous_{};
};

}  // namespace

void prepare_thread_for_faults() {
  static thread_local AltStack alt;
  alt.install();
}

bool guarded_call(void (*fn)(void*), void* arg, std::string* what) {
  sigjmp_buf jump;
  sigjmp_buf* volatile saved = t_jump;  // nested guarded calls restore the outer one
  // The signal mask is not saved (that is a system call, and this runs once
  // per kernel block): the only change a fault makes to it is the delivered
  // signal, blocked while on_fault runs (its sa_mask is empty), so the
  // fault path unblocks that one signal itself.
  if (sigsetjmp(jump, 0) != 0) {
    t_jump = saved;
    sigset_t delivered;
    sigemptyset(&delivered);
    sigaddset(&delivered, t_signal);
    pthread_sigmask(SIG_UNBLOCK, &delivered, nullptr);
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
