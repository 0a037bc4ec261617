#include "cli/torch_version.h"

#include <cctype>

#include "core/program_output.h"

namespace ddprun::launcher::cli_detail {
namespace {

// Prints torch's __version__ from its version.py, found by the import system without running the
// package's __init__ (which would load libtorch); prints nothing when there is no torch.
constexpr const char* kProbe =
    "import importlib.util, os, re\n"
    "spec = importlib.util.find_spec('torch')\n"
    "if spec and spec.submodule_search_locations:\n"
    "    path = os.path.join(list(spec.submodule_search_locations)[0], 'version.py')\n"
    "    text = open(path).read(65536) if os.path.isfile(path) else ''\n"
    "    found = re.search(r\"__version__\\s*=\\s*['\\\"]([^'\\\"]+)\", text)\n"
    "    print(found.group(1) if found else '')\n";

}  // namespace

std::optional<std::string> torchVersionOf(const std::string& python, const Environment& environment,
                                          std::chrono::milliseconds timeout) {
  const std::optional<std::string> text =
      programOutput({python, "-c", kProbe}, environment, timeout);
  if (!text || text->size() > 64) return std::nullopt;
  for (char c : *text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '+' && c != '-' &&
        c != '_')
      return std::nullopt;
  }
  return text;
}

std::optional<int> torchMajor(const std::string& version) {
  int major = 0;
  std::size_t i = 0;
  for (; i < version.size() && std::isdigit(static_cast<unsigned char>(version[i])); ++i) {
    if (i >= 4) return std::nullopt;
    major = major * 10 + (version[i] - '0');
  }
  if (i == 0 || (i < version.size() && version[i] != '.')) return std::nullopt;
  return major;
}

}  // namespace ddprun::launcher::cli_detail
