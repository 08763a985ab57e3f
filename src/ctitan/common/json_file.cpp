// json_file.h: the temp file and the rename.
#include "ctitan/common/json_file.h"

#include <fmt/format.h>

#include <fstream>
#include <system_error>

#include "ctitan/common/error.h"

namespace ctitan {

namespace fs = std::filesystem;

void write_file_atomically(const fs::path& path, const std::string& contents) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << contents;
    if (!out.flush()) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw IoError(fmt::format("cannot write {}", tmp.string()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw IoError(fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
  }
}

void write_json_file(const fs::path& path, const nlohmann::json& j) {
  write_file_atomically(path, j.dump(2, ' ', /*ensure_ascii=*/false) + "\n");
}

}  // namespace ctitan
