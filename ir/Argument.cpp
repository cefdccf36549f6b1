#include "ir/Argument.h"

#include "ir/Graph.h"

namespace commlens {

int64_t SymIntArg::hint() const { return value ? value->symbol().hint : constant; }

llvm::SmallVector<Value *, 4> Argument::tensors() const {
  llvm::SmallVector<Value *, 4> out;
  forEachTensor([&](Value *v) { out.push_back(v); });
  return out;
}

std::optional<int64_t> Argument::asInt() const {
  if (is<int64_t>())
    return get<int64_t>();
  if (is<SymIntArg>())
    return get<SymIntArg>().hint();
  return std::nullopt;
}

std::optional<IntList> Argument::asIntList() const {
  if (is<IntList>())
    return get<IntList>();
  if (is<SymIntList>()) {
    IntList out;
    for (const SymIntArg &s : get<SymIntList>())
      out.push_back(s.hint());
    return out;
  }
  return std::nullopt;
}

} // namespace commlens
