// Runs the calls of its scope on tensorcore's own f32 GEMM kernels
// (src/cpu/gemm_f32.cpp) whatever BLAS the build links: the library reads
// TC_CPU_BLAS at every f32 product. Restores the variable on exit.
#pragma once

#include <cstdlib>
#include <string>

class OwnSgemm {
 public:
  OwnSgemm() {
    if (const char* v = std::getenv("TC_CPU_BLAS")) {
      had_ = true;
      old_ = v;
    }
    setenv("TC_CPU_BLAS", "0", 1);
  }
  ~OwnSgemm() {
    if (had_) setenv("TC_CPU_BLAS", old_.c_str(), 1);
    else unsetenv("TC_CPU_BLAS");
  }
  OwnSgemm(const OwnSgemm&) = delete;
  OwnSgemm& operator=(const OwnSgemm&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};
