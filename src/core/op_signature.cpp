// The signature notation of src/capi/entries.def (core/op_signature.h).
#include "core/op_signature.h"

#include <sstream>
#include <stdexcept>

namespace tc {
namespace sig {
namespace {

[[noreturn]] void bad_signature(const char* c_name, const std::string& why) {
  throw std::logic_error(std::string("entries.def: ") + c_name + ": " + why);
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Splits at `sep` outside brackets.
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  for (char ch : s) {
    depth += ch == '[' ? 1 : ch == ']' ? -1 : 0;
    if (ch == sep && depth == 0) {
      out.push_back(trim(item));
      item.clear();
    } else {
      item += ch;
    }
  }
  out.push_back(trim(item));
  return out;
}

// One parameter: "in? X[N,D]:dtype ~Y|Z", "i64 N", "f32 eps >=0", "desc tc_gemm_desc desc".
Param parse_param(const char* c_name, const std::string& text) {
  Param p;
  std::istringstream words(text);
  std::string kind;
  words >> kind;
  if (kind == "ctx") {
    p.kind = Param::Ctx;
    p.name = "ctx";
    return p;
  }
  std::string rest;
  std::getline(words, rest);
  rest = trim(rest);
  std::string base = kind;
  if (!base.empty() && base.back() == '?') {
    p.optional = true;
    base.pop_back();
  }
  if (base == "in" || base == "out" || base == "inout") {
    p.kind = Param::Buffer;
    p.input = base != "out";
    p.output = base != "in";
    const size_t tilde = rest.find('~');
    if (tilde != std::string::npos) {
      p.alias = split(rest.substr(tilde + 1), '|');
      rest = trim(rest.substr(0, tilde));
    }
    const size_t open = rest.find('['), close = rest.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open)
      bad_signature(c_name, "operand '" + text + "' has no [shape]");
    p.name = rest.substr(0, open);
    const std::string dims = rest.substr(open + 1, close - open - 1);
    if (dims != "*") {
      p.ruled = true;
      p.dims = split(dims, ',');
      if (close + 1 >= rest.size() || rest[close + 1] != ':')
        bad_signature(c_name, "operand '" + p.name + "' has a shape but no :element type");
      p.elem = rest.substr(close + 2);
    }
    return p;
  }
  if (p.optional) bad_signature(c_name, "only buffers may be optional: '" + text + "'");
  if (kind == "desc") {
    p.kind = Param::Desc;
    std::istringstream r(rest);
    r >> p.ctype >> p.name;
    return p;
  }
  static const std::pair<const char*, Param::Kind> scalars[] = {
      {"i64", Param::I64}, {"i32", Param::I32}, {"f32", Param::F32}, {"f64", Param::F64},
      {"dtype", Param::Dtype}, {"quant", Param::Quant}};
  for (const auto& s : scalars)
    if (kind == s.first) {
      p.kind = s.second;
      std::istringstream r(rest);
      std::string rule;
      r >> p.name >> rule;
      if (rule == ">=0") p.nonneg = true;
      else if (!rule.empty()) bad_signature(c_name, "unknown scalar rule '" + rule + "'");
      return p;
    }
  bad_signature(c_name, "unknown parameter kind '" + kind + "'");
}

const Param* find_param(const std::vector<Param>& ps, const std::string& name) {
  for (const Param& p : ps)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace

std::vector<Param> parse(const char* c_name, const char* signature) {
  std::vector<Param> params;
  for (const std::string& text : split(signature, ',')) params.push_back(parse_param(c_name, text));
  // Names a shape or alias uses must be parameters of the right kind;
  // resolved to positions here so that a call compares no names.
  auto at = [&](const std::string& name) { return int(find_param(params, name) - params.data()); };
  for (Param& p : params) {
    for (const std::string& dim : p.dims) {
      const Param* q = find_param(params, dim);
      if (!q || q->kind != Param::I64) bad_signature(c_name, p.name + ": dimension " + dim + " is not an i64 parameter");
      p.dim_at.push_back(at(dim));
      params[size_t(at(dim))].is_dim = true;
    }
    if (p.ruled && p.elem != "f32" && p.elem != "i32") {
      const Param* q = find_param(params, p.elem);
      if (!q || q->kind != Param::Dtype) bad_signature(c_name, p.name + ": element type " + p.elem + " is unknown");
      p.elem_at = at(p.elem);
    }
    for (const std::string& a : p.alias) {
      const Param* q = find_param(params, a);
      if (!q || q->kind != Param::Buffer) bad_signature(c_name, p.name + ": alias " + a + " is not an operand");
      p.alias_at.push_back(at(a));
    }
  }
  return params;
}

}  // namespace sig
}  // namespace tc
