// json_file.h: the document, written through write_file_atomically.
#include "ctitan/common/json_file.h"

#include "ctitan/common/atomic_file.h"

namespace ctitan {

namespace fs = std::filesystem;

void write_json_file(const fs::path& path, const nlohmann::json& j) {
  write_file_atomically(path, j.dump(2, ' ', /*ensure_ascii=*/false) + "\n");
}

}  // namespace ctitan
