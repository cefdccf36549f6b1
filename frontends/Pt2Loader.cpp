#include "frontends/Pt2Loader.h"

#include "frontends/ExportedProgramReader.h"
#include "frontends/Pt2Archive.h"
#include "ir/Error.h"

namespace commlens {

llvm::Expected<std::unique_ptr<ExportedProgram>> loadPt2(llvm::StringRef path) {
  auto archive = Pt2Archive::open(path);
  if (!archive)
    return archive.takeError();
  Pt2Archive &ar = **archive;
  if (ar.hasRecord("archive_format")) {
    auto format = ar.read("archive_format");
    if (!format)
      return format.takeError();
    if (llvm::StringRef(*format).trim() != "pt2")
      return makeError("archive_format is '{}', expected 'pt2'", llvm::StringRef(*format).trim().str());
  }
  // torch.export.save always names the program "model".
  constexpr llvm::StringLiteral kModelRecord = "models/model.json";
  if (!ar.hasRecord(kModelRecord)) {
    if (ar.hasRecord("serialized_exported_program.json"))
      return makeError("legacy torch.export archive (torch <= 2.7) is not supported");
    return makeError("no {} record: not a torch.export.save archive", kModelRecord.str());
  }
  auto modelJson = ar.read(kModelRecord);
  if (!modelJson)
    return modelJson.takeError();
  auto program = parseExportedProgram(*modelJson, kModelRecord);
  if (!program)
    return program.takeError();
  // The writer's name and the older documented name of the weights config.
  for (llvm::StringRef record : {"data/weights/model_weights_config.json", "data/weights/model_model_param_config.json"}) {
    if (!ar.hasRecord(record))
      continue;
    auto config = ar.read(record);
    if (!config)
      return config.takeError();
    if (llvm::Error err = parseWeightsConfig(*config, **program, record))
      return err;
    break;
  }
  return program;
}

} // namespace commlens
