// Fuzz target: a Hugging Face hub cache folder, resolved as --models and the model picker resolve it. The
// input builds a tree under a scratch folder, one line each:
//   d PATH            a folder
//   f PATH<TAB>TEXT   a file holding TEXT (\n in TEXT for a line break)
//   l PATH<TAB>TARGET a symbolic link to TARGET, as written (relative, absolute, a loop, a device)
// PATH is relative to the cache (cache/models--org--name, its parent holding it); a PATH that climbs out,
// or that would be created through a link, is skipped, so nothing is written outside the scratch folder.
// What resolves must be a snapshot under the cache's snapshots/ whose links all lead inside the cache; what
// does not resolve is refused with a message (difflens::Error). Nothing may hang or read without bound.
#include <filesystem>
#include <string>
#include <string_view>

#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

namespace fs = std::filesystem;

// PATH made safe to create under `root`: relative, no "..", and no existing link on the way.
bool safe_path(const fs::path& root, const std::string& rel, fs::path* out) {
  const fs::path p = fs::path(rel).lexically_normal();
  if (rel.empty() || p.is_absolute() || p.empty() || p.has_root_path()) return false;
  fs::path at = root;
  for (const fs::path& part : p) {
    if (part == ".." || part == "." || part.empty()) return false;
    std::error_code ec;
    if (fs::is_symlink(at, ec)) return false;
    at /= part;
  }
  std::error_code ec;
  if (fs::is_symlink(at, ec) || fs::exists(fs::symlink_status(at, ec))) return false;  // made already
  *out = at;
  return true;
}

std::string unescape(std::string_view s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
      r += '\n';
      ++i;
    } else {
      r += s[i];
    }
  }
  return r;
}

void build_tree(const fs::path& root, std::string_view spec) {
  int made = 0;
  while (!spec.empty() && made < 64) {
    const size_t nl = spec.find('\n');
    const std::string_view line = spec.substr(0, nl);
    spec.remove_prefix(nl == std::string_view::npos ? spec.size() : nl + 1);
    if (line.size() < 3 || line[1] != ' ') continue;
    const std::string_view rest = line.substr(2);
    const size_t tab = rest.find('\t');
    const std::string rel(rest.substr(0, tab));
    const std::string arg = tab == std::string_view::npos ? "" : unescape(rest.substr(tab + 1));
    fs::path at;
    if (!safe_path(root, rel, &at)) continue;
    std::error_code ec;
    fs::create_directories(at.parent_path(), ec);
    if (ec) continue;
    ++made;
    if (line[0] == 'd') {
      fs::create_directory(at, ec);
    } else if (line[0] == 'f') {
      difflens::fuzz::write_file(at, arg);
    } else if (line[0] == 'l' && !arg.empty()) {
      fs::create_symlink(arg, at, ec);
    }
  }
}

// Every link directly in `snap` leads, resolved, inside `cache`.
bool links_within(const fs::path& cache, const fs::path& snap) {
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(cache, ec);
  if (ec) return false;
  for (fs::directory_iterator it(snap, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_symlink(e2)) continue;
    const fs::path target = fs::canonical(it->path(), e2);
    if (e2) return false;
    const fs::path rel = target.lexically_relative(root);
    if (rel.empty() || *rel.begin() == "..") return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  const fs::path parent = fuzz::empty_dir("hub");
  const fs::path cache = parent / "models--org--name";
  std::error_code ec;
  fs::create_directory(cache, ec);
  build_tree(cache, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const fs::path snap = resolve_hub_cache(cache);
    if (snap != cache) {
      FUZZ_CHECK(snap.parent_path() == cache / "snapshots");
      FUZZ_CHECK(links_within(cache, snap));
    }
    if (std::filesystem::is_regular_file(snap / "config.json", ec)) (void)read_model_config(snap);
  } catch (const Error&) {
  }
  for (const fs::path& typed : {cache, parent}) {
    try {
      for (const fs::path& m : models_in(typed)) FUZZ_CHECK(!m.empty());
    } catch (const Error&) {
    }
  }
  return 0;
}
