#include "core/file_text.h"

#include <utility>

namespace ddprun::launcher {

std::optional<std::string> readFileText(const std::string& path, std::string* why,
                                        std::size_t limit, std::size_t offset,
                                        common::Links links) {
  auto read = common::readFile(path, {limit, offset, links});
  if (!read) {
    if (why) *why = read.error().describe();
    return std::nullopt;
  }
  return std::move(read->bytes);
}

}  // namespace ddprun::launcher
