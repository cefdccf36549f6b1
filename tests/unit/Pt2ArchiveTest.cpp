// The .pt2 archive reader on a memory buffer (Pt2Archive::openBuffer, loadPt2Buffer), on zip
// archives built here byte by byte (stored entries, as torch.export.save writes them).
#include "frontends/Pt2Archive.h"
#include "frontends/Pt2Loader.h"

#include "llvm/Support/CRC.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

using namespace commlens;

namespace {

void put16(std::string &out, uint32_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}
void put32(std::string &out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

/// A zip archive of stored (uncompressed) entries: local headers and data, the central
/// directory, the end record.
std::string zipOf(const std::vector<std::pair<std::string, std::string>> &entries) {
  std::string out, central;
  for (const auto &[name, data] : entries) {
    uint32_t crc = llvm::crc32(llvm::arrayRefFromStringRef(data));
    uint32_t offset = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);
    put16(out, 20); // version needed
    put16(out, 0);  // flags
    put16(out, 0);  // stored
    put32(out, 0);  // time, date
    put32(out, crc);
    put32(out, static_cast<uint32_t>(data.size()));
    put32(out, static_cast<uint32_t>(data.size()));
    put16(out, static_cast<uint32_t>(name.size()));
    put16(out, 0); // extra
    out += name;
    out += data;
    put32(central, 0x02014b50);
    put16(central, 20); // version made by
    put16(central, 20); // version needed
    put16(central, 0);
    put16(central, 0);
    put32(central, 0);
    put32(central, crc);
    put32(central, static_cast<uint32_t>(data.size()));
    put32(central, static_cast<uint32_t>(data.size()));
    put16(central, static_cast<uint32_t>(name.size()));
    put16(central, 0); // extra
    put16(central, 0); // comment
    put16(central, 0); // disk
    put16(central, 0); // internal attributes
    put32(central, 0); // external attributes
    put32(central, offset);
    central += name;
  }
  uint32_t centralOffset = static_cast<uint32_t>(out.size());
  out += central;
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(entries.size()));
  put16(out, static_cast<uint32_t>(entries.size()));
  put32(out, static_cast<uint32_t>(central.size()));
  put32(out, centralOffset);
  put16(out, 0); // comment
  return out;
}

template <typename T> std::string errorOf(llvm::Expected<T> value) {
  EXPECT_FALSE(static_cast<bool>(value));
  return value ? std::string("(no error)") : llvm::toString(value.takeError());
}

} // namespace

TEST(Pt2Archive, OpenBufferReadsRecords) {
  auto archive = Pt2Archive::openBuffer(zipOf({{"model/version", "1\n"}, {"model/models/model.json", "{}"}}));
  ASSERT_TRUE(static_cast<bool>(archive)) << llvm::toString(archive.takeError());
  auto records = (*archive)->records();
  ASSERT_TRUE(static_cast<bool>(records)) << llvm::toString(records.takeError());
  EXPECT_EQ(*records, (std::vector<std::string>{"version", "models/model.json"}));
  EXPECT_TRUE((*archive)->hasRecord("models/model.json"));
  EXPECT_FALSE((*archive)->hasRecord("models/other.json"));
  auto text = (*archive)->read("models/model.json");
  ASSERT_TRUE(static_cast<bool>(text));
  EXPECT_EQ(*text, "{}");
}

TEST(Pt2Archive, OpenBufferRefusesWhatIsNoZip) {
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer("{}")), "not a zip archive (expected a torch.export.save .pt2 file)");
  EXPECT_EQ(errorOf(Pt2Archive::openBuffer("")), "not a zip archive (expected a torch.export.save .pt2 file)");
}

// Found by fuzz/pt2_archive: LibTorch checks that an entry lies in the root folder only when it
// lists the records, and threw c10::Error out of records() (std::terminate).
TEST(Pt2Archive, RecordOutsideTheRootFolderIsAnError) {
  auto archive = Pt2Archive::openBuffer(zipOf({{"model/version", "1\n"}, {"other/data.pkl", "x"}}));
  ASSERT_TRUE(static_cast<bool>(archive)) << llvm::toString(archive.takeError());
  EXPECT_EQ(errorOf((*archive)->records()),
            "cannot list records: file in archive is not in a subdirectory model/: other/data.pkl");
}

TEST(Pt2Archive, LoadPt2BufferNamesTheRecordAtFault) {
  EXPECT_EQ(errorOf(loadPt2Buffer(zipOf({{"model/version", "1\n"}}))),
            "no models/model.json record: not a torch.export.save archive");
  EXPECT_EQ(errorOf(loadPt2Buffer(zipOf({{"model/version", "1\n"}, {"model/models/model.json", "[1e999]"}}))),
            "models/model.json: invalid JSON: number overflow parsing '1e999'");
}
