// Test-only driver for the RedistributePlanner oracle (tests/redistribute). Not part of the CLI.
//
//   redistribute_driver '{"mesh":[2,4],"device":"cpu","shape":[10,6],"dtype":"f32",
//                         "src":["S(0)","P(sum)"],"dst":["R","R"],
//                         "names":["a","b"],"flatten":[[0,1]]}'
//   redistribute_driver < cases.jsonl        (one case per line, one JSON answer per line)
//
// Answer: {"ok":true,"user_refusal":null|"...","collectives":[{"op","mesh_dims","src","dst",
// "group_size","input_bytes","output_bytes"}...],"steps":[{"action","mesh_dims","src","dst"}...],
// "cost":"<redistribute_cost>","trace":"..."} or {"ok":false,"error":"...","cost":...}.
// Optional: "devices_per_host" (cost model), "force_min_cost" (use_min_cost_redistribution_plan),
// "src_shard_order" ([[tensor_dim, [mesh dims...]], ...]).
#include "dtensor/RedistributePlanner.h"

#include "ir/Error.h"

#include <fmt/format.h>

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <iostream>
#include <string>

using namespace commlens;

namespace {

llvm::Expected<Placements> placementsOf(const llvm::json::Object &o, llvm::StringRef key) {
  const llvm::json::Array *arr = o.getArray(key);
  if (!arr)
    return makeError("missing '{}'", key.str());
  Placements out;
  for (const llvm::json::Value &v : *arr) {
    auto s = v.getAsString();
    if (!s)
      return makeError("'{}' entries must be strings", key.str());
    llvm::StringRef text = *s;
    if (text.consume_front("_S(") && text.consume_back(")")) { // _StridedShard: "_S(dim,split_factor)"
      auto [d, sf] = text.split(',');
      Placement p{Placement::Kind::StridedShard, 0, 1, ReduceOp::Sum};
      if (d.trim().getAsInteger(10, p.dim) || sf.trim().getAsInteger(10, p.splitFactor))
        return makeError("bad placement '{}'", s->str());
      out.push_back(p);
      continue;
    }
    auto p = Placement::parse(*s);
    if (!p)
      return p.takeError();
    out.push_back(*p);
  }
  return out;
}

llvm::json::Array dimsJson(llvm::ArrayRef<unsigned> dims) {
  llvm::json::Array a;
  for (unsigned d : dims)
    a.push_back(static_cast<int64_t>(d));
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

  DeviceMesh mesh;
  if (const llvm::json::Array *m = o->getArray("mesh"))
    for (const llvm::json::Value &v : *m)
      mesh.shape.push_back(v.getAsInteger().getValueOr(0));
  if (const llvm::json::Array *n = o->getArray("names"))
    for (const llvm::json::Value &v : *n)
      mesh.dimNames.push_back(v.getAsString().getValueOr("").str());
  mesh.deviceType = o->getString("device").getValueOr("cpu") == "cuda" ? MeshDeviceType::Cuda : MeshDeviceType::Cpu;

  TensorMeta meta;
  if (const llvm::json::Array *s = o->getArray("shape"))
    for (const llvm::json::Value &v : *s)
      meta.sizes.push_back(SymInt::concrete(v.getAsInteger().getValueOr(0)));
  std::optional<ScalarType> dtype = scalarTypeFromShortName(o->getString("dtype").getValueOr("f32"));
  if (!dtype)
    return fail("bad dtype");
  meta.dtype = *dtype;

  RedistributeOptions options;
  if (const llvm::json::Array *f = o->getArray("flatten"))
    for (const llvm::json::Value &g : *f) {
      llvm::SmallVector<unsigned, 2> dims;
      if (const llvm::json::Array *ga = g.getAsArray())
        for (const llvm::json::Value &d : *ga)
          dims.push_back(static_cast<unsigned>(d.getAsInteger().getValueOr(0)));
      options.flattenedDims.push_back(dims);
    }

  if (auto force = o->getBoolean("force_min_cost"))
    options.forceMinCostPlan = *force;
  if (const llvm::json::Array *order = o->getArray("src_shard_order")) { // [[tensor_dim, [mesh dims]], ...]
    llvm::SmallVector<ShardOrderEntry, 2> entries;
    for (const llvm::json::Value &e : *order) {
      const llvm::json::Array *pair = e.getAsArray();
      if (!pair || pair->size() != 2 || !(*pair)[1].getAsArray())
        return fail("bad src_shard_order");
      ShardOrderEntry entry;
      entry.tensorDim = (*pair)[0].getAsInteger().getValueOr(0);
      for (const llvm::json::Value &d : *(*pair)[1].getAsArray())
        entry.meshDims.push_back(static_cast<unsigned>(d.getAsInteger().getValueOr(0)));
      entries.push_back(entry);
    }
    options.srcShardOrder = entries;
  }
  options.devicesPerHost = o->getInteger("devices_per_host").getValueOr(0);

  auto src = placementsOf(*o, "src");
  if (!src)
    return fail(takeMessage(src.takeError()));
  auto dst = placementsOf(*o, "dst");
  if (!dst)
    return fail(takeMessage(dst.takeError()));

  llvm::json::Value refusal = nullptr;
  if (std::optional<std::string> r = userRedistributeRefusal(*src, *dst, meta.rank()))
    refusal = *r;

  // redistribute_cost, as a string ("inf" is not JSON); null where it errors.
  llvm::json::Value cost = nullptr;
  int64_t devicesPerHost = o->getInteger("devices_per_host").getValueOr(0);
  if (llvm::Expected<double> c = redistributeCost(mesh, meta, *src, *dst, devicesPerHost, options))
    cost = fmt::format("{:.17g}", *c);
  else
    llvm::consumeError(c.takeError());

  llvm::Expected<RedistributePlan> plan = planRedistribute(mesh, meta, *src, *dst, options);
  if (!plan) {
    llvm::json::Object out = fail(takeMessage(plan.takeError()));
    out["user_refusal"] = std::move(refusal);
    out["cost"] = std::move(cost);
    return out;
  }
  llvm::json::Array collectives, steps;
  for (const RedistributeStep &s : plan->steps) {
    steps.push_back(llvm::json::Object{{"action", name(s.action)},
                                       {"mesh_dims", dimsJson(s.meshDims)},
                                       {"src", s.src.str()},
                                       {"dst", s.dst.str()}});
    if (!s.isCollective())
      continue;
    collectives.push_back(llvm::json::Object{{"op", s.opKey()},
                                             {"mesh_dims", dimsJson(s.meshDims)},
                                             {"src", s.src.str()},
                                             {"dst", s.dst.str()},
                                             {"group_size", s.groupSize},
                                             {"input_bytes", s.inputBytes},
                                             {"output_bytes", s.outputBytes}});
  }
  return llvm::json::Object{{"ok", true},
                            {"graph_planner", plan->usedGraphPlanner},
                            {"user_refusal", std::move(refusal)},
                            {"cost", std::move(cost)},
                            {"collectives", std::move(collectives)},
                            {"steps", std::move(steps)},
                            {"trace", plan->str()}};
}

void answer(llvm::StringRef text) {
  llvm::outs() << run(text) << "\n";
  llvm::outs().flush();
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1) {
    for (int i = 1; i < argc; ++i)
      answer(argv[i]);
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line))
    if (!llvm::StringRef(line).trim().empty())
      answer(line);
  return 0;
}
