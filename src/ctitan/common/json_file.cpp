// write_json_file (json_file.h): the temp file and the rename.
#include "ctitan/common/json_file.h"

#include <fmt/format.h>

#include <fstream>
#include <system_error>

#include "ctitan/common/error.h"

namespace ctitan {

namespace fs = std::filesystem;

void write_json_file(const fs::path& path, const nlohmann::json& j) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << j.dump(2, ' ', /*ensure_ascii=*/false) << "\n";
    if (!out.flush()) throw IoError(fmt::format("cannot write {}", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw IoError(fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
}

}  // namespace ctitan
