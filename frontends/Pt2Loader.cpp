#include "frontends/Pt2Loader.h"

#include "frontends/ExportedProgramReader.h"
#include "ir/JsonRef.h"
#include "frontends/OpSchemas.h"
#include "frontends/Pt2Archive.h"
#include "frontends/TorchScriptLoader.h"
#include "ir/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace commlens {
namespace {

/// Without a tie record: tied parameters are separate placeholders that the archive stores once, so
/// a parameter whose weight record and layout equal an earlier parameter's is an alias of it. Not
/// on the meta device: torch.export.save groups tensors by their storage's data pointer (0 for
/// every meta tensor), so all meta weights share one record whether tied or not.
void markTiedParametersByStorage(ExportedProgram &program) {
  std::map<std::string, const WeightInfo *> byFqn;
  for (const WeightInfo &w : program.weights)
    byFqn[w.fqn] = &w;
  std::vector<std::pair<const WeightInfo *, std::string>> seen;
  for (InputSpec &in : program.graph().inputs()) {
    if (in.kind != InputKind::Parameter)
      continue;
    auto it = byFqn.find(in.target);
    if (it == byFqn.end())
      continue;
    const WeightInfo &w = *it->second;
    if (w.meta.device.type == "meta") {
      program.tiedParametersUnknown = true;
      continue;
    }
    for (const auto &[earlier, fqn] : seen)
      if (earlier->record == w.record && earlier->meta.sizes == w.meta.sizes &&
          earlier->meta.strides == w.meta.strides && earlier->meta.storageOffset == w.meta.storageOffset) {
        in.aliasOf = fqn;
        break;
      }
    if (in.aliasOf.empty())
      seen.emplace_back(&w, in.target);
  }
}

/// The records of an opened archive (a TorchScript one converted from its bytes).
llvm::Expected<Pt2Records> readRecords(llvm::Expected<std::unique_ptr<Pt2Archive>> archive,
                                       const TorchScriptOptions &torchScript) {
  if (!archive)
    return archive.takeError();
  Pt2Archive &ar = **archive;
  if (isTorchScriptArchive(ar)) {
    auto converted = convertTorchScript(ar, torchScript);
    if (!converted)
      return converted.takeError();
    Pt2Records records;
    records.modelJson = std::move(converted->programJson);
    records.modelRecord = "the program converted from TorchScript";
    records.weightsConfig = std::move(converted->weightsConfigJson);
    records.weightsRecord = "the weights config converted from TorchScript";
    records.torchScriptStats = converted->stats;
    return records;
  }
  // The PT2 archive records torch 2.13 writes (torch/csrc/export/pt2_archive_constants.h) and its
  // reader checks (torch/export/pt2_archive/_package.py): archive_format is "pt2", archive_version
  // "0" (absent: an archive from before the versions, read as 0).
  for (auto [record, expected] : {std::pair{"archive_format", "pt2"}, std::pair{"archive_version", "0"}}) {
    if (!ar.hasRecord(record))
      continue;
    auto text = ar.read(record);
    if (!text)
      return text.takeError();
    if (*text != expected)
      return makeError("{} is {}, expected '{}'", record, quoteRecordText(*text), expected);
  }
  // torch.export.save always names the program "model".
  constexpr llvm::StringLiteral kModelRecord = "models/model.json";
  if (!ar.hasRecord(kModelRecord)) {
    if (ar.hasRecord("serialized_exported_program.json"))
      return makeError("legacy torch.export archive (torch <= 2.7) is not supported");
    return makeError("no {} record: not a torch.export.save archive", kModelRecord.str());
  }
  Pt2Records records;
  records.modelJsonInPlace = ar.readInPlace(kModelRecord, kJsonPadding);
  if (!records.modelJsonInPlace) {
    auto modelJson = ar.read(kModelRecord);
    if (!modelJson)
      return modelJson.takeError();
    records.modelJson = std::move(*modelJson);
  }
  // The writer's name and the older documented name of the weights config.
  for (llvm::StringRef record : {"data/weights/model_weights_config.json", "data/weights/model_model_param_config.json"}) {
    if (!ar.hasRecord(record))
      continue;
    auto config = ar.read(record);
    if (!config)
      return config.takeError();
    records.weightsConfig = std::move(*config);
    records.weightsRecord = record.str();
    break;
  }
  if (ar.hasRecord(kTiedParametersRecord)) {
    auto tied = ar.read(kTiedParametersRecord);
    if (!tied)
      return tied.takeError();
    records.tiedParameters = std::move(*tied);
  }
  if (records.modelJsonInPlace)
    records.archive = std::move(*archive);
  return records;
}

} // namespace

llvm::Expected<Pt2Records> readPt2Records(llvm::StringRef path, const TorchScriptOptions &torchScript) {
  return readRecords(Pt2Archive::open(path), torchScript);
}

llvm::Expected<std::unique_ptr<ExportedProgram>> decodePt2(const Pt2Records &records, bool checkSchemas) {
  auto program = parseExportedProgram(records.modelJsonInPlace.value_or(records.modelJson), records.modelRecord,
                                      checkSchemas ? NodeCheck(checkNodeAgainstOpSchema) : NodeCheck(),
                                      /*padded=*/records.modelJsonInPlace.has_value());
  if (!program)
    return program.takeError();
  if (records.weightsConfig)
    if (llvm::Error err = parseWeightsConfig(*records.weightsConfig, **program, records.weightsRecord))
      return err;
  if (records.tiedParameters) {
    if (llvm::Error err = applyTiedParameters(**program, *records.tiedParameters, kTiedParametersRecord))
      return err;
  } else {
    markTiedParametersByStorage(**program);
  }
  return program;
}

llvm::Error applyTiedParameters(ExportedProgram &program, llvm::StringRef json, llvm::StringRef recordName) {
  auto doc = parseJsonText(json, recordName);
  if (!doc)
    return doc.takeError();
  std::map<std::string, InputSpec *, std::less<>> params;
  for (InputSpec &in : program.graph().inputs())
    if (in.kind == InputKind::Parameter)
      params.emplace(in.target, &in);
  try {
    JsonRef root = (*doc)->root();
    if (std::string format = root.field("format").asString(); format != "commlens-tied-parameters")
      root.field("format").fail(fmt::format("'{}' is not 'commlens-tied-parameters'", format));
    if (int64_t version = root.field("version").asInt(); version != 1)
      root.field("version").fail(fmt::format("version {} is not supported (expected 1)", version));
    std::set<std::string, std::less<>> grouped;
    for (const JsonRef &group : root.field("groups").items()) {
      std::vector<JsonRef> names = group.items();
      if (names.size() < 2)
        group.fail("a group of tied parameters needs at least two names");
      std::vector<InputSpec *> members;
      for (const JsonRef &name : names) {
        llvm::StringRef fqn = name.asStringRef();
        auto it = params.find(fqn);
        if (it == params.end())
          name.fail(fmt::format("'{}' is not a parameter of the program", fqn.str()));
        if (!grouped.insert(fqn.str()).second)
          name.fail(fmt::format("'{}' is in two groups", fqn.str()));
        members.push_back(it->second);
      }
      InputSpec *canonical = *std::min_element(members.begin(), members.end()); // one vector: first input
      for (InputSpec *m : members)
        if (m != canonical)
          m->aliasOf = canonical->target;
    }
  } catch (const ParseError &e) {
    return makeError("{}: {}", recordName.str(), e.message);
  }
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<ExportedProgram>> loadPt2(llvm::StringRef path, const TorchScriptOptions &torchScript) {
  auto records = readPt2Records(path, torchScript);
  if (!records)
    return records.takeError();
  return decodePt2(*records);
}

llvm::Expected<std::unique_ptr<ExportedProgram>> loadPt2Buffer(llvm::StringRef bytes,
                                                               const TorchScriptOptions &torchScript) {
  auto records = readRecords(Pt2Archive::openBuffer(bytes), torchScript);
  if (!records)
    return records.takeError();
  return decodePt2(*records);
}

} // namespace commlens
