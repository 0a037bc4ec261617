// Python's string.Template.safe_substitute, which torchrun uses for ${local_rank} in worker
// arguments and for TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace ddprun::common {

// `text` with "$$" replaced by "$", and "$name" and "${name}" by values[name] when `name` is
// there; everything else (unknown names, '$' before a non-identifier, an unclosed "${") stays as
// written. Names are Python identifiers in ASCII: [_a-zA-Z][_a-zA-Z0-9]*.
std::string safeSubstitute(std::string_view text, const std::map<std::string, std::string>& values);

}  // namespace ddprun::common
