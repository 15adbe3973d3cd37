#include "runtime/loader.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/switches.h"

namespace simpler {

namespace {

bool write_all(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// dlerror() is not thread-safe to pair with dlopen across threads.
std::mutex g_dl_mu;

}  // namespace

std::shared_ptr<SharedObject> SharedObject::load(const std::string& bytes, const std::string& what, Error* err) {
  if (bytes.size() < 4 || std::memcmp(bytes.data(), "\x7f" "ELF", 4) != 0) {
    *err = make_error(TC_ERR_INVALID_ARG,
                      "%s is not a shared object (%zu bytes without an ELF header); cpu kernels and orchestrations "
                      "are host shared objects built by KernelCompiler(platform='cpu')",
                      what.c_str(), bytes.size());
    return nullptr;
  }
  std::string path;
  int fd = memfd_create("simpler-object", MFD_CLOEXEC);
  bool temp_file = false;
  if (fd >= 0) {
    path = "/proc/self/fd/" + std::to_string(fd);
  } else {
    std::string tmpl = read_switch("TMPDIR").text + "/simpler-object-XXXXXX";
    fd = mkstemp(&tmpl[0]);
    if (fd < 0) {
      *err = make_error(TC_ERR_IO, "cannot create a file to load %s from: %s", what.c_str(), std::strerror(errno));
      return nullptr;
    }
    path = tmpl;
    temp_file = true;
  }
  if (!write_all(fd, bytes)) {
    ::close(fd);
    if (temp_file) ::unlink(path.c_str());
    *err = make_error(TC_ERR_IO, "cannot write %s for loading: %s", what.c_str(), std::strerror(errno));
    return nullptr;
  }
  void* h;
  std::string dl_error;
  {
    std::lock_guard<std::mutex> lk(g_dl_mu);
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      dl_error = e ? e : "unknown dlopen error";
    }
  }
  // The descriptor stays open as long as the object is loaded: dlopen
  // recognises objects by path, and a reused /proc/self/fd/N would name a
  // different object.
  if (temp_file || !h) {
    ::close(fd);
    fd = -1;
  }
  if (temp_file) ::unlink(path.c_str());
  if (!h) {
    *err = make_error(TC_ERR_INVALID_ARG, "cannot load %s: %s", what.c_str(), dl_error.c_str());
    return nullptr;
  }
  std::shared_ptr<SharedObject> so(new SharedObject());
  so->handle_ = h;
  so->fd_ = fd;
  return so;
}

SharedObject::~SharedObject() {
  if (handle_) dlclose(handle_);
  if (fd_ >= 0) ::close(fd_);
}

void* SharedObject::symbol(const char* name) const {
  std::lock_guard<std::mutex> lk(g_dl_mu);
  return dlsym(handle_, name);
}

}  // namespace simpler
