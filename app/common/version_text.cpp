// The version line without LibTorch (see version.h): what the launcher and the main program share.
// difflens_build_info.h is written at build time by cmake/version.cmake.
#include <exception>

#include "app/common/version_text.h"
#include "core/cpu/attention_cpu.h"
#include "core/formats/tokenizer.h"
#include "difflens_build_info.h"

namespace difflens {

std::string version_number() {
  return DIFFLENS_VERSION;
}

std::string version_line_for(const std::string& libtorch, const std::vector<std::string>& gpus) {
  std::string line = "DiffLens " + version_number();
  const std::string commit = DIFFLENS_GIT_COMMIT;
  line += commit.empty() ? " (commit unknown)"
                         : " (commit " + commit + (DIFFLENS_GIT_DIRTY ? ", modified)" : ")");
  line += ", LibTorch " + libtorch + ", CPU " + cpu_isa_name();
  if (gpus.empty()) {
    line += ", CUDA: no GPU";
  } else {
    line += ", CUDA: ";
    for (size_t i = 0; i < gpus.size(); ++i) line += (i ? ", " : "") + gpus[i];
  }
  try {
    line += ", SentencePiece module " + sentencepiece_module_path();
  } catch (const std::exception&) {
    line += ", SentencePiece module not found (DIFFLENS_SPM_MODULE names it)";
  }
  return line;
}

}  // namespace difflens
