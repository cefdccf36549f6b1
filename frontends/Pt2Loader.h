// Loads a `torch.export.save` archive into the IR: finds the model record and weights config,
// checks the archive format, and parses them. A TorchScript archive (torch.jit.save) is refused
// unless TorchScriptOptions::enabled, and then converted to the same program JSON first, by a
// worker process under limits (frontends/TorchScriptLoader). Messages are "<what is wrong>" (the caller adds
// the file name).
#pragma once

#include "frontends/Pt2Archive.h"
#include "frontends/TorchScriptLoader.h"
#include "ir/Graph.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <string>

namespace commlens {

/// The records of an archive the IR is decoded from, read once: `commlens rank` decodes a
/// fresh program per plan from them (the passes rewrite the program they run on).
struct Pt2Records {
  std::string modelJson; // unless modelJsonInPlace
  /// The model record where it lies in `archive` (stored uncompressed, followed by kJsonPadding
  /// readable bytes), parsed there: the largest record, not copied.
  std::optional<llvm::StringRef> modelJsonInPlace;
  std::unique_ptr<Pt2Archive> archive; // kept open for modelJsonInPlace
  std::string modelRecord = "models/model.json"; // where modelJson came from, for messages
  std::optional<std::string> weightsConfig;
  std::string weightsRecord;
  std::optional<std::string> tiedParameters; // kTiedParametersRecord, written by commlens.export
  /// The worker's peak RSS, times and limits, for an archive converted from TorchScript.
  std::optional<TorchScriptProgram::Stats> torchScriptStats;
};

/// The record commlens.export adds to the archive (torch.export.save's extra_files): the groups of
/// parameter FQNs that are one nn.Parameter, from the exported program's state_dict,
/// {"format": "commlens-tied-parameters", "version": 1, "groups": [["tok.weight", "head.weight"]]}.
inline constexpr llvm::StringLiteral kTiedParametersRecord = "extra/commlens_tied_parameters.json";

/// Marks the tied parameters a tie record names (aliasOf: the member first among the program's
/// inputs); `recordName` is for messages. Each name must be a parameter of the program, in one group.
llvm::Error applyTiedParameters(ExportedProgram &program, llvm::StringRef json, llvm::StringRef recordName);

/// `torchScript`: whether a TorchScript archive is read (converted under its limits) or refused.
llvm::Expected<Pt2Records> readPt2Records(llvm::StringRef path, const TorchScriptOptions &torchScript = {});

/// Decodes the records; `checkSchemas` checks each node against its operator's schema (OpSchemas.h;
/// needed once per archive).
llvm::Expected<std::unique_ptr<ExportedProgram>> decodePt2(const Pt2Records &records, bool checkSchemas = true);

/// readPt2Records + decodePt2.
llvm::Expected<std::unique_ptr<ExportedProgram>> loadPt2(llvm::StringRef path,
                                                         const TorchScriptOptions &torchScript = {});
/// The same from the archive's bytes in memory (no file).
llvm::Expected<std::unique_ptr<ExportedProgram>> loadPt2Buffer(llvm::StringRef bytes,
                                                               const TorchScriptOptions &torchScript = {});

} // namespace commlens
