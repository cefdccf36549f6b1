// Read access to the records of a `torch.export.save` archive (a zip, zip64 as torch writes it,
// with one root folder). Backed by libzip; this header exposes no libzip types. One thread at a
// time: the records share one libzip handle.
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace commlens {

/// Text from an archive, for a one-line message: quoted, escaped, its first 40 bytes.
std::string quoteRecordText(llvm::StringRef text);

class Pt2Archive {
public:
  /// Opens the zip; fails with a one-line message when it is not a readable archive.
  static llvm::Expected<std::unique_ptr<Pt2Archive>> open(llvm::StringRef path);
  /// Opens an archive held in memory (the bytes are copied); the same checks and messages as open.
  static llvm::Expected<std::unique_ptr<Pt2Archive>> openBuffer(llvm::StringRef bytes);
  ~Pt2Archive();

  /// Record names relative to the archive's root folder; fails when an entry is outside it.
  llvm::Expected<std::vector<std::string>> records() const;
  bool hasRecord(llvm::StringRef name) const;
  /// The whole archive as opened (the file mapped, or the copy openBuffer made).
  llvm::StringRef bytes() const;
  llvm::Expected<std::string> read(llvm::StringRef name) const;
  /// The record's bytes where they lie in bytes(), when it is stored uncompressed, its CRC matches
  /// and at least `trailing` bytes of the archive follow it (a parser's padding, read past the
  /// end); nothing otherwise, and read() copies it out or says what is wrong with it.
  std::optional<llvm::StringRef> readInPlace(llvm::StringRef name, size_t trailing) const;

private:
  struct Impl;
  explicit Pt2Archive(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace commlens
