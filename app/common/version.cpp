// The version line with what LibTorch says of itself (see version.h).
#include "app/common/version.h"

#include "core/model/model.h"

namespace difflens {

std::string version_line() {
  return version_line_for(libtorch_version(), cuda_devices());
}

}  // namespace difflens
