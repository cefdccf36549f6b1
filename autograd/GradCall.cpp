#include "autograd/GradCall.h"

#include "ir/Error.h"

#include "ir/TensorMetaUtils.h"

#include <algorithm>

namespace commlens {

namespace {

int operandIndex(const Node &n, llvm::StringRef name) {
  int i = 0;
  for (const NamedArgument &a : n.inputs())
    for (Value *v : a.value.tensors()) {
      if (v->kind() != ValueKind::Tensor)
        continue;
      if (a.name == name)
        return i;
      ++i;
    }
  return -1;
}

bool columnMajor(const Value *v) {
  if (!v->meta() || v->meta()->rank() != 2)
    return false;
  auto s = sizesOf(*v->meta());
  auto st = stridesOf(*v->meta());
  if (v->producer() &&
      (v->producer()->opString() == "aten::t.default" || v->producer()->opString() == "aten::transpose.int"))
    return true;
  return st[0] == 1 && st[1] == s[0];
}

} // namespace

namespace derivatives {

std::optional<double> numberOf(const Argument *a) {
  if (!a || a->isNone())
    return std::nullopt;
  if (a->is<double>())
    return a->get<double>();
  if (a->is<bool>())
    return a->get<bool>() ? 1.0 : 0.0;
  if (auto i = a->asInt())
    return static_cast<double>(*i);
  return std::nullopt;
}

Value *maybeMultiply(GradCall &c, Value *x, const Argument *s) {
  if (!s || s->isNone())
    return x;
  if (auto v = numberOf(s); v && *v == 1.0)
    return x;
  return c.e.emit("aten::mul.Scalar", {A("self", x), A("other", *s)}, GradEmitter::like(x), "grad_scale");
}

Value *contiguous(GradCall &c, Value *x) {
  if (isContiguous(*x->meta()))
    return x;
  return c.e.emit("aten::clone.default", {A("self", x), K("memory_format", MemoryFormat::Contiguous)},
                  GradEmitter::like(x), "grad_contiguous");
}

Value *scalarTensor(GradCall &c, const Argument &value, const Value *like) {
  return c.e.emit("aten::scalar_tensor.default", {A("s", value)}, metaOf(like->meta()->dtype, {}, like->meta()->device),
                  "grad_scalar");
}

Value *scalarLeft(GradCall &c, llvm::StringRef inplaceOp, const Argument &scalar, Value *x) {
  Value *e = c.e.emit("aten::empty_like.default", {A("self", x), K("memory_format", MemoryFormat::Preserve)},
                      GradEmitter::like(x), "grad_empty");
  Value *f = c.e.emit("aten::fill_.Scalar", {A("self", e), A("value", scalar)}, GradEmitter::like(x), "grad_fill");
  return c.e.emit(inplaceOp, {A("self", f), A("other", x)}, GradEmitter::like(f), "grad_inplace");
}

} // namespace derivatives

using derivatives::A;
using derivatives::K;
using derivatives::numberOf;

// ---- GradEmitter helpers ----------------------------------------------------------------------

Value *GradEmitter::emit(llvm::StringRef op, llvm::SmallVector<NamedArgument, 4> &&args, TensorMeta meta,
                         llvm::StringRef hint) {
  Value *v = newValue(hint, std::move(meta));
  emitNode(v->name(), op, std::move(args), {Argument(v)});
  return v;
}

TensorMeta GradEmitter::like(const Value *v) {
  return metaOf(v->meta()->dtype, sizesOf(*v->meta()), v->meta()->device);
}

TensorMeta GradEmitter::withSizes(const Value *v, llvm::ArrayRef<int64_t> sizes) {
  return metaOf(v->meta()->dtype, sizes, v->meta()->device);
}

Value *GradEmitter::t(Value *x) {
  auto s = sizesOf(*x->meta());
  auto st = stridesOf(*x->meta());
  std::swap(s[0], s[1]);
  std::swap(st[0], st[1]);
  return emit("aten::t.default", {A("self", x)}, metaOf(x->meta()->dtype, s, x->meta()->device, st), "grad_t");
}

Value *GradEmitter::transpose(Value *x, int64_t d0, int64_t d1) {
  auto s = sizesOf(*x->meta());
  auto st = stridesOf(*x->meta());
  int64_t r = static_cast<int64_t>(s.size());
  d0 = d0 < 0 ? d0 + r : d0;
  d1 = d1 < 0 ? d1 + r : d1;
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return emit("aten::transpose.int", {A("self", x), A("dim0", d0), A("dim1", d1)},
              metaOf(x->meta()->dtype, s, x->meta()->device, st), "grad_transpose");
}

Value *GradEmitter::mm(Value *a, Value *b) {
  auto sa = sizesOf(*a->meta()), sb = sizesOf(*b->meta());
  return emit("aten::mm.default", {A("self", a), A("mat2", b)}, metaOf(a->meta()->dtype, {sa[0], sb[1]}, a->meta()->device),
              "grad_mm");
}

Value *GradEmitter::bmm(Value *a, Value *b) {
  auto sa = sizesOf(*a->meta()), sb = sizesOf(*b->meta());
  return emit("aten::bmm.default", {A("self", a), A("mat2", b)},
              metaOf(a->meta()->dtype, {sa[0], sa[1], sb[2]}, a->meta()->device), "grad_bmm");
}

Value *GradEmitter::unsqueeze(Value *x, int64_t d) {
  auto xs = sizesOf(*x->meta());
  xs.insert(xs.begin() + d, 1);
  return emit("aten::unsqueeze.default", {A("self", x), A("dim", d)}, metaOf(x->meta()->dtype, xs, x->meta()->device),
              "grad_unsqueeze");
}

Value *GradEmitter::newZerosLike(Value *g, const Value *target) {
  auto sizes = sizesOf(*target->meta());
  return emit("aten::new_zeros.default", {A("self", g), A("size", IntList(sizes.begin(), sizes.end()))}, like(target),
              "grad_zeros");
}

Value *GradEmitter::reshape(Value *x, llvm::ArrayRef<int64_t> sizes) {
  IntList size(sizes.begin(), sizes.end());
  if (sizesOf(*x->meta()) == llvm::SmallVector<int64_t, 4>(sizes.begin(), sizes.end()))
    return emit("aten::view.default", {A("self", x), A("size", size)},
                metaOf(x->meta()->dtype, sizes, x->meta()->device, stridesOf(*x->meta())), "grad_view");
  if (auto st = viewStrides(*x->meta(), sizes))
    return emit("aten::view.default", {A("self", x), A("size", size)},
                metaOf(x->meta()->dtype, sizes, x->meta()->device, *st), "grad_view");
  Value *c = emit("aten::clone.default", {A("self", x), K("memory_format", MemoryFormat::Contiguous)}, like(x),
                  "grad_clone");
  return emit("aten::_unsafe_view.default", {A("self", c), A("size", size)},
              metaOf(x->meta()->dtype, sizes, x->meta()->device), "grad_view");
}

Value *GradEmitter::sumTo(Value *g, const TensorMeta &target) {
  auto gs = sizesOf(*g->meta());
  auto ts = sizesOf(target);
  if (gs == ts || gs.size() < ts.size())
    return g;
  size_t leading = gs.size() - ts.size();
  IntList dims;
  for (size_t i = 0; i < leading; ++i)
    dims.push_back(static_cast<int64_t>(i));
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i] == 1 && gs[leading + i] != 1)
      dims.push_back(static_cast<int64_t>(leading + i));
  if (dims.empty())
    return g;
  llvm::SmallVector<int64_t, 4> kept = gs;
  for (int64_t d : dims)
    kept[d] = 1;
  Value *r = emit("aten::sum.dim_IntList", {A("self", g), A("dim", dims), A("keepdim", true)},
                  metaOf(g->meta()->dtype, kept, g->meta()->device), "grad_sum");
  if (leading > 0)
    r = emit("aten::view.default", {A("self", r), A("size", IntList(ts.begin(), ts.end()))},
             metaOf(g->meta()->dtype, ts, g->meta()->device), "grad_view");
  return r;
}

Value *GradEmitter::mmMat1Backward(Value *g, Value *mat2, const Value *mat1) {
  if (columnMajor(mat1))
    return t(mm(mat2, t(g)));
  return mm(g, t(mat2));
}

Value *GradEmitter::mmMat2Backward(Value *g, Value *mat1, const Value *mat2) {
  if (columnMajor(mat2))
    return t(mm(t(g), mat1));
  return mm(t(mat1), g);
}

Value *GradEmitter::unsqueezeMultiple(Value *g, llvm::ArrayRef<int64_t> dims, bool keepdim) {
  if (keepdim)
    return g;
  IntList ds(dims.begin(), dims.end());
  std::sort(ds.begin(), ds.end());
  for (int64_t d : ds)
    g = unsqueeze(g, d);
  return g;
}

Value *GradEmitter::sumBackward(Value *g, llvm::ArrayRef<int64_t> sizes, llvm::ArrayRef<int64_t> dims, bool keepdim) {
  // sum_backward unsqueezes only for a reduced input of at least one dim (a 0-dim one's dim 0 / -1
  // reduces nothing)
  Value *x = sizes.empty() ? g : unsqueezeMultiple(g, dims, keepdim);
  // Tensor.expand's strides: 0 on every broadcast dim (later contiguous() calls copy such a grad).
  auto xs = sizesOf(*x->meta());
  auto xst = stridesOf(*x->meta());
  llvm::SmallVector<int64_t, 4> strides(sizes.size(), 0);
  size_t lead = sizes.size() - xs.size();
  for (size_t i = lead; i < sizes.size(); ++i)
    strides[i] = xs[i - lead] == sizes[i] ? xst[i - lead] : 0;
  return emit("aten::expand.default", {A("self", x), A("size", IntList(sizes.begin(), sizes.end()))},
              metaOf(x->meta()->dtype, sizes, x->meta()->device, strides), "grad_expand");
}

// ---- GradCall ---------------------------------------------------------------------------------

const Value *GradCall::result(unsigned i) const {
  auto r = n.results();
  return i < r.size() ? r[i] : nullptr;
}

Value *GradCall::operand(llvm::StringRef name) const {
  const Argument *a = n.input(name);
  return a && a->isTensor() ? a->tensor() : nullptr;
}

bool GradCall::want(llvm::StringRef name) const {
  int i = operandIndex(n, name);
  return i >= 0 && i < static_cast<int>(needed.size()) && needed[i];
}

llvm::Error GradCall::notDifferentiable(llvm::StringRef name) const {
  return makeError("autodiff: {} is not differentiable with respect to '{}' (torch raises when it requires grad)",
                   n.where(), name);
}

void GradCall::set(llvm::StringRef name, Value *v) {
  if (int i = operandIndex(n, name); i >= 0 && i < static_cast<int>(out.size()))
    out[i] = v;
}

std::optional<int64_t> GradCall::intArg(llvm::StringRef name, std::optional<int64_t> dflt) const {
  const Argument *a = n.input(name);
  if (!a || a->isNone())
    return dflt;
  return a->asInt();
}

std::optional<double> GradCall::floatArg(llvm::StringRef name) const { return numberOf(n.input(name)); }

bool GradCall::boolArg(llvm::StringRef name, bool dflt) const {
  const Argument *a = n.input(name);
  return a && a->is<bool>() ? a->get<bool>() : dflt;
}

IntList GradCall::dimsAsPassed(llvm::StringRef name) const {
  const Argument *a = n.input(name);
  std::optional<IntList> dims = a ? a->asIntList() : std::nullopt;
  return dims ? *dims : IntList{};
}

IntList GradCall::reducedDims(llvm::StringRef name) const {
  Value *x = self();
  int64_t rank = x ? x->meta()->rank() : 0;
  std::optional<IntList> dims;
  if (const Argument *a = n.input(name); a && !a->isNone()) {
    if (auto one = a->asInt())
      dims = IntList{*one};
    else
      dims = a->asIntList();
  }
  IntList ds;
  if (dims && !dims->empty())
    for (int64_t d : *dims)
      ds.push_back(d < 0 ? d + rank : d);
  else
    for (int64_t d = 0; d < rank; ++d)
      ds.push_back(d);
  std::sort(ds.begin(), ds.end());
  return ds;
}

} // namespace commlens
