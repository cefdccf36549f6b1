// Test-only driver for the ShardingRules oracle (tests/rules). Not part of the CLI.
//
// One JSON case per line on stdin (or as argv[1]), one JSON answer per line on stdout:
//   {"op":"aten::mm.default","mesh":[4],"device":"cpu",
//    "args":[{"name":"self","tensor":{"shape":[8,16],"dtype":"f32","placements":["S(0)"]}},
//            {"name":"mat2","tensor":{"shape":[16,4],"dtype":"f32","placements":null}},   // plain
//            {"name":"dim","int":1}, {"name":"size","ints":[2,3]}, {"name":"keepdim","bool":true},
//            {"name":"scalars","floats":[0.5]}, {"name":"output_mask","bools":[true,false]},
//            {"name":"alpha","float":0.5 | "inf"}, {"name":"dtype","dtype":"bf16"}, {"name":"x","none":true},
//            {"name":"rounding_mode","str":"floor","keyword":true},
//            {"name":"tensors","tensors":[{...tensor...} | null, ...]}],
//    "outputs":[{"shape":[8,4],"dtype":"f32"} | {"list":[{"shape":..}, ...]} | {"int":8} | null]}
// Answer: {"ok":true,"operands":[["S(0)"] | null, ...],"results":[[..] | null, ...],
//          "collectives":N (RedistributePlanner over the operand redistributions) | null,
//          "plan_error":null | "..." (a redistribution DTensor would raise on),"why":"..."}
//      or {"ok":false,"error":"..."}; {"supported":true} lists every supported op.
#include "ir/Error.h"
#include "ir/Graph.h"
#include "dtensor/RedistributePlanner.h"
#include "dtensor/ShardingRules.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <iostream>
#include <string>

using namespace commlens;

namespace {

llvm::Expected<TensorMeta> metaOf(const llvm::json::Object &t) {
  TensorMeta m;
  if (const llvm::json::Array *s = t.getArray("shape"))
    for (const llvm::json::Value &v : *s)
      m.sizes.push_back(SymInt::concrete(v.getAsInteger().getValueOr(0)));
  std::optional<ScalarType> dt = scalarTypeFromShortName(t.getString("dtype").getValueOr("f32"));
  if (!dt)
    return makeError("bad dtype");
  m.dtype = *dt;
  return m;
}

llvm::json::Value placementsJson(const std::optional<Placements> &p) {
  if (!p)
    return nullptr;
  llvm::json::Array a;
  for (const Placement &x : *p)
    a.push_back(x.str());
  return a;
}

llvm::json::Value run(llvm::StringRef text) {
  auto fail = [](std::string msg) { return llvm::json::Object{{"ok", false}, {"error", std::move(msg)}}; };
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return fail(takeMessage(parsed.takeError()));
  const llvm::json::Object *o = parsed->getAsObject();
  if (!o)
    return fail("case must be a JSON object");
  if (o->getBoolean("supported").getValueOr(false)) {
    llvm::json::Array a;
    for (const std::string &s : ShardingRules::get().supportedOps())
      a.push_back(s);
    return llvm::json::Object{{"ok", true}, {"ops", std::move(a)}};
  }

  DeviceMesh mesh;
  if (const llvm::json::Array *m = o->getArray("mesh"))
    for (const llvm::json::Value &v : *m)
      mesh.shape.push_back(v.getAsInteger().getValueOr(0));
  mesh.deviceType = o->getString("device").getValueOr("cpu") == "cuda" ? MeshDeviceType::Cuda : MeshDeviceType::Cpu;

  Graph g;
  unsigned counter = 0;
  std::vector<std::optional<DTensorSpec>> specs;
  auto makeTensor = [&](const llvm::json::Object &t) -> llvm::Expected<Value *> {
    auto meta = metaOf(t);
    if (!meta)
      return meta.takeError();
    Value *v = g.createValue("t" + std::to_string(counter++), ValueKind::Tensor);
    v->setMeta(*meta);
    const llvm::json::Value *pl = t.get("placements");
    if (!pl || pl->kind() == llvm::json::Value::Null) {
      specs.push_back(std::nullopt);
    } else {
      DTensorSpec s;
      s.meta = *meta;
      for (const llvm::json::Value &x : *pl->getAsArray()) {
        auto p = Placement::parse(x.getAsString().getValueOr(""));
        if (!p)
          return p.takeError();
        s.placements.push_back(*p);
      }
      specs.push_back(std::move(s));
    }
    return v;
  };

  llvm::SmallVector<NamedArgument, 4> inputs;
  if (const llvm::json::Array *args = o->getArray("args"))
    for (const llvm::json::Value &av : *args) {
      const llvm::json::Object *a = av.getAsObject();
      if (!a)
        return fail("args entries must be objects");
      NamedArgument na;
      na.name = a->getString("name").getValueOr("").str();
      na.keyword = a->getBoolean("keyword").getValueOr(false);
      if (const llvm::json::Object *t = a->getObject("tensor")) {
        auto v = makeTensor(*t);
        if (!v)
          return fail(takeMessage(v.takeError()));
        na.value = *v;
      } else if (const llvm::json::Array *ts = a->getArray("tensors")) {
        // null entries make an optional list (index's and index_put's indices)
        OptionalTensorList list;
        bool optional = false;
        for (const llvm::json::Value &tv : *ts) {
          if (tv.kind() == llvm::json::Value::Null) {
            optional = true;
            list.items.push_back(nullptr);
            continue;
          }
          auto v = makeTensor(*tv.getAsObject());
          if (!v)
            return fail(takeMessage(v.takeError()));
          list.items.push_back(*v);
        }
        if (optional)
          na.value = list;
        else
          na.value = TensorList(list.items.begin(), list.items.end());
      } else if (auto i = a->getInteger("int")) {
        na.value = *i;
      } else if (const llvm::json::Array *is = a->getArray("ints")) {
        IntList l;
        for (const llvm::json::Value &x : *is)
          l.push_back(x.getAsInteger().getValueOr(0));
        na.value = l;
      } else if (const llvm::json::Array *fs = a->getArray("floats")) {
        FloatList l;
        for (const llvm::json::Value &x : *fs)
          l.push_back(x.getAsNumber().getValueOr(0));
        na.value = l;
      } else if (const llvm::json::Array *bs = a->getArray("bools")) {
        BoolList l;
        for (const llvm::json::Value &x : *bs)
          l.push_back(x.getAsBoolean().getValueOr(false));
        na.value = l;
      } else if (auto b = a->getBoolean("bool")) {
        na.value = *b;
      } else if (auto f = a->getNumber("float")) {
        na.value = *f;
      } else if (auto fs = a->getString("float")) { // "inf", "-inf": JSON has no infinity
        na.value = std::stod(fs->str());
      } else if (auto str = a->getString("str")) {
        na.value = str->str();
      } else if (auto d = a->getString("dtype")) {
        auto dt = scalarTypeFromShortName(*d);
        if (!dt)
          return fail("bad dtype arg");
        na.value = *dt;
      } else {
        na.value = NoneArg{};
      }
      inputs.push_back(std::move(na));
    }

  llvm::SmallVector<Argument, 1> outputs;
  if (const llvm::json::Array *outs = o->getArray("outputs"))
    for (const llvm::json::Value &ov : *outs) {
      const llvm::json::Object *oo = ov.getAsObject();
      if (!oo) { // a result the kernel leaves undefined (flash attention's cum_seq_q)
        outputs.push_back(NoneArg{});
        continue;
      }
      if (auto i = oo->getInteger("int")) { // a SymInt result (max_q)
        outputs.push_back(*i);
        continue;
      }
      auto one = [&](const llvm::json::Object &t) -> llvm::Expected<Value *> {
        auto meta = metaOf(t);
        if (!meta)
          return meta.takeError();
        Value *v = g.createValue("r" + std::to_string(counter++), ValueKind::Tensor);
        v->setMeta(*meta);
        return v;
      };
      if (const llvm::json::Array *l = oo->getArray("list")) {
        TensorList list;
        for (const llvm::json::Value &x : *l) {
          auto v = one(*x.getAsObject());
          if (!v)
            return fail(takeMessage(v.takeError()));
          list.push_back(*v);
        }
        outputs.push_back(list);
      } else {
        auto v = one(*oo);
        if (!v)
          return fail(takeMessage(v.takeError()));
        outputs.push_back(*v);
      }
    }

  Node *n = g.appendNode("n0", o->getString("op").getValueOr(""), std::move(inputs), std::move(outputs));
  auto d = ShardingRules::get().decide(*n, specs, mesh);
  if (!d)
    return fail(takeMessage(d.takeError()));
  llvm::json::Array ops, res;
  int64_t collectives = 0;
  std::string planError;
  for (size_t i = 0; i < d->operandPlacements.size(); ++i) {
    const auto &p = d->operandPlacements[i];
    ops.push_back(placementsJson(p));
    if (p && specs[i]) {
      auto plan = planRedistribute(mesh, specs[i]->meta, specs[i]->placements, *p);
      if (!plan) {
        if (planError.empty())
          planError = takeMessage(plan.takeError());
        else
          llvm::consumeError(plan.takeError());
        continue;
      }
      collectives += static_cast<int64_t>(plan->numCollectives());
    }
  }
  for (const auto &p : d->resultPlacements)
    res.push_back(placementsJson(p));
  return llvm::json::Object{{"ok", true}, {"operands", std::move(ops)}, {"results", std::move(res)},
                           {"collectives", planError.empty() ? llvm::json::Value(collectives) : llvm::json::Value(nullptr)},
                           {"plan_error", planError.empty() ? llvm::json::Value(nullptr) : llvm::json::Value(planError)},
                           {"why", d->why}};
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1) {
    llvm::outs() << run(argv[1]) << "\n";
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty())
      continue;
    llvm::outs() << run(line) << "\n";
    llvm::outs().flush();
  }
  return 0;
}
