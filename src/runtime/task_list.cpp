#include "runtime/task_list.h"

#include <sstream>

#include "simpler/simpler.h"

namespace simpler {

namespace {

thread_local const TaskList* t_list = nullptr;

Error bad(int line, const std::string& what) {
  return make_error(TC_ERR_INVALID_ARG, "ChipCallable.from_tasks: line %d: %s", line, what.c_str());
}

bool read_box(std::istringstream& in, TaskList::Tensor* t) {
  uint32_t n = 0;
  if (!(in >> n)) return true;  // no box: the whole tensor
  if (n < 1 || n > SIMPLER_MAX_TENSOR_DIMS) return false;
  t->ndims = n;
  for (uint32_t k = 0; k < n; k++)
    if (!(in >> t->offsets[k])) return false;
  for (uint32_t k = 0; k < n; k++)
    if (!(in >> t->shapes[k])) return false;
  return true;
}

}  // namespace

Error parse_task_list(const std::string& text, uint32_t chip_tensors, std::shared_ptr<const TaskList>* out) {
  auto list = std::make_shared<TaskList>();
  std::vector<uint32_t> created;  // outputs created by each task
  std::istringstream lines(text);
  std::string line;
  int no = 0;
  bool header = false;
  int depth = 0;
  while (std::getline(lines, line)) {
    no++;
    std::istringstream in(line);
    std::string word;
    if (!(in >> word)) continue;
    if (!header) {
      int version = 0;
      if (word != "simpler-task-list" || !(in >> version) || version != 1)
        return bad(no, "expected the header 'simpler-task-list 1'");
      header = true;
      continue;
    }
    if (word == "task") {
      TaskList::Item it;
      it.kind = TaskList::Item::Task;
      if (!(in >> it.func_id >> it.block_num) || it.func_id < 0 || it.block_num < 1)
        return bad(no, "task needs <func_id >= 0> <block_num >= 1>");
      list->items.push_back(it);
      created.push_back(0);
      list->task_count++;
    } else if (word == "t" || word == "s") {
      if (list->items.empty() || list->items.back().kind != TaskList::Item::Task)
        return bad(no, "an argument outside a task");
      TaskList::Item& it = list->items.back();
      if (word == "s") {
        uint64_t v;
        if (!(in >> v)) return bad(no, "s needs a value");
        if (it.scalars.size() >= SIMPLER_MAX_CORE_SCALARS) return bad(no, "more than 16 scalars");
        it.scalars.push_back(v);
        continue;
      }
      TaskList::Tensor t;
      unsigned access = 0;
      std::string kind;
      if (!(in >> access >> kind) || access < 1 || access > 3) return bad(no, "t needs <access 1..3> <kind>");
      t.access = uint8_t(access);
      if (kind == "arg") {
        t.kind = TaskList::Tensor::Arg;
        if (!(in >> t.a) || t.a >= chip_tensors)
          return bad(no, "arg index out of range (the signature has " + std::to_string(chip_tensors) + " tensors)");
        if (!read_box(in, &t)) return bad(no, "bad view box");
      } else if (kind == "out") {
        t.kind = TaskList::Tensor::Out;
        // The current task is number task_count - 1: only earlier ones qualify.
        if (!(in >> t.a >> t.b) || t.a >= list->task_count - 1) return bad(no, "out needs an earlier task");
        if (t.b >= created[t.a])
          return bad(no, "task " + std::to_string(t.a) + " creates " + std::to_string(created[t.a]) + " output(s)");
        if (!read_box(in, &t)) return bad(no, "bad view box");
      } else if (kind == "new") {
        t.kind = TaskList::Tensor::New;
        if (t.access != SIMPLER_ACCESS_OUT) return bad(no, "a new tensor is an output (access 2)");
        if (!(in >> t.ndims >> t.dtype) || t.ndims < 1 || t.ndims > SIMPLER_MAX_TENSOR_DIMS ||
            simpler_dtype_size(t.dtype) == 0)
          return bad(no, "new needs <ndims 1..5> <dtype>");
        for (uint32_t k = 0; k < t.ndims; k++)
          if (!(in >> t.shapes[k]) || t.shapes[k] == 0) return bad(no, "new needs positive shapes");
        created.back()++;
      } else {
        return bad(no, "unknown tensor kind '" + kind + "'");
      }
      if (it.tensors.size() >= SIMPLER_MAX_CORE_TENSORS) return bad(no, "more than 32 tensors");
      it.tensors.push_back(t);
    } else if (word == "scope_begin") {
      TaskList::Item it;
      it.kind = TaskList::Item::ScopeBegin;
      in >> it.mode;
      list->items.push_back(it);
      depth++;
    } else if (word == "scope_end") {
      if (depth == 0) return bad(no, "scope_end without scope_begin");
      TaskList::Item it;
      it.kind = TaskList::Item::ScopeEnd;
      list->items.push_back(it);
      depth--;
    } else {
      return bad(no, "unknown item '" + word + "'");
    }
  }
  if (!header) return bad(no, "empty description");
  if (depth != 0) return bad(no, "scope_begin without scope_end");
  *out = list;
  return {};
}

void set_current_task_list(const TaskList* list) { t_list = list; }

void task_list_orchestration(const ::ChipTaskArgs& args) {
  const TaskList* list = t_list;
  if (!list) return;
  std::vector<TaskOutputTensors> outs(list->task_count);
  uint32_t task = 0;
  for (const TaskList::Item& it : list->items) {
    if (rt_is_fatal()) return;
    if (it.kind == TaskList::Item::ScopeBegin) {
      rt_scope_begin(PTO2ScopeMode(it.mode));
      continue;
    }
    if (it.kind == TaskList::Item::ScopeEnd) {
      rt_scope_end();
      continue;
    }
    CoreTaskArgs p;
    for (const TaskList::Tensor& t : it.tensors) {
      if (t.kind == TaskList::Tensor::New) {
        TensorCreateInfo ci(t.shapes, t.ndims, DataType(t.dtype));
        p.add_output(ci);
        continue;
      }
      ChipTensor v = t.kind == TaskList::Tensor::Arg ? args.tensor(t.a) : outs[t.a].get_ref(t.b);
      if (t.ndims) {
        if (t.ndims != v.ndims) {
          rt_report_fatal(PTO2_ERROR_INVALID_ARGS, "task %u: a %u-D box of a %u-D tensor", task, t.ndims, v.ndims);
          return;
        }
        v = make_view(v, t.shapes, t.offsets);
      }
      if (t.access == SIMPLER_ACCESS_IN)
        p.add_input(v);
      else if (t.access == SIMPLER_ACCESS_OUT)
        p.add_output(v);
      else
        p.add_inout(v);
    }
    for (uint64_t s : it.scalars) p.add_scalar(s);
    p.set_block_num(it.block_num);
    outs[task++] = rt_submit_task(it.func_id, p);
  }
}

}  // namespace simpler
