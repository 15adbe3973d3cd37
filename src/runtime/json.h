// A minimal JSON writer for the diagnostics files.
#pragma once

#include <cinttypes>
#include <cstdio>
#include <string>

namespace simpler {

class Json {
 public:
  std::string& str() { return s_; }
  Json& raw(const char* t) {
    s_ += t;
    return *this;
  }
  Json& key(const char* k) {
    sep();
    quote(k);
    s_ += ':';
    fresh_ = true;
    return *this;
  }
  Json& begin_obj() {
    sep();
    s_ += '{';
    fresh_ = true;
    return *this;
  }
  Json& end_obj() {
    s_ += '}';
    fresh_ = false;
    return *this;
  }
  Json& begin_arr() {
    sep();
    s_ += '[';
    fresh_ = true;
    return *this;
  }
  Json& end_arr() {
    s_ += ']';
    fresh_ = false;
    return *this;
  }
  Json& val(const std::string& v) {
    sep();
    quote(v.c_str());
    return *this;
  }
  Json& val(const char* v) {
    sep();
    quote(v);
    return *this;
  }
  Json& val(uint64_t v) {
    sep();
    char b[32];
    std::snprintf(b, sizeof b, "%" PRIu64, v);
    s_ += b;
    return *this;
  }
  Json& val(int64_t v) {
    sep();
    char b[32];
    std::snprintf(b, sizeof b, "%" PRId64, v);
    s_ += b;
    return *this;
  }
  Json& val(int v) { return val(int64_t(v)); }
  Json& val(unsigned v) { return val(uint64_t(v)); }
  Json& val(bool v) {
    sep();
    s_ += v ? "true" : "false";
    return *this;
  }
  Json& null() {
    sep();
    s_ += "null";
    return *this;
  }
  template <class T>
  Json& kv(const char* k, const T& v) {
    key(k);
    return val(v);
  }

 private:
  void sep() {
    if (!fresh_ && !s_.empty()) {
      char c = s_.back();
      if (c != '[' && c != '{' && c != ':') s_ += ',';
    }
    fresh_ = false;
  }
  void quote(const char* t) {
    s_ += '"';
    for (const char* p = t; *p; p++) {
      unsigned char c = static_cast<unsigned char>(*p);
      if (c == '"' || c == '\\') {
        s_ += '\\';
        s_ += char(c);
      } else if (c < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", c);
        s_ += b;
      } else {
        s_ += char(c);
      }
    }
    s_ += '"';
  }
  std::string s_;
  bool fresh_ = true;
};

}  // namespace simpler
