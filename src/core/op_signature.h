// The signature notation of the op table (src/capi/entries.def), read by
// the capi validator and by simpler's built-in kernels: one parser for both.
#pragma once

#include <string>
#include <vector>

namespace tc {
namespace sig {

// One parameter of a signature.
struct Param {
  enum Kind { Ctx, Buffer, I64, I32, F32, F64, Dtype, Quant, Desc } kind = Ctx;
  std::string name;
  bool input = false, output = false, optional = false;
  std::vector<std::string> dims;  // [N, D]: names of i64 parameters; empty with `ruled` false: [*]
  bool ruled = false;             // sized by dims and elem here, not by the entry
  std::string elem;               // a dtype parameter's name, or f32 / i32
  std::vector<std::string> alias; // operands an output may exactly be
  bool nonneg = false;            // scalar rule >=0
  std::string ctype;              // desc: the struct's C name
  // Resolved once when the table is parsed: positions in the signature.
  std::vector<int> dim_at;    // of dims
  int elem_at = -1;           // of elem when it is a dtype parameter
  std::vector<int> alias_at;  // of alias
  bool is_dim = false;        // an i64 some shape rule names
};

// The parameters of `signature`, with names resolved to positions; throws
// std::logic_error naming `c_name` when the text cannot be read.
std::vector<Param> parse(const char* c_name, const char* signature);

}  // namespace sig
}  // namespace tc
