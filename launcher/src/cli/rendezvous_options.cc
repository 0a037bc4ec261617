#include "cli/rendezvous_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "cli/arguments.h"
#include "cli/given_values.h"
#include "cli/options.h"
#include "cli/rendezvous.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using namespace cli_detail;

constexpr std::array<std::string_view, 4> kRendezvousOptions = {"rdzv-backend", "rdzv-endpoint",
                                                                "rdzv-id", "rdzv-conf"};

bool isRendezvousOption(std::string_view name) {
  return std::find(kRendezvousOptions.begin(), kRendezvousOptions.end(), name) !=
         kRendezvousOptions.end();
}

}  // namespace

CommandLine parseRendezvousOptions(const std::string& command, const std::vector<std::string>& args,
                                   const std::map<std::string, std::string>& environment) {
  std::vector<const char*> argv{"ddprun"};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  SplitArguments split = splitArguments(static_cast<int>(argv.size()), argv.data());
  if (split.scriptIndex >= 0) {
    throw UsageError(
        fmt::format("{} takes no argument {}; give the job as --rdzv-endpoint HOST:PORT "
                    "--rdzv-id ID",
                    command, quote(argv[static_cast<std::size_t>(split.scriptIndex)])));
  }
  for (const auto& [name, given] : split.options) {
    if (!isRendezvousOption(name)) {
      throw UsageError(
          fmt::format("{} does not take {}; it takes --rdzv-endpoint, --rdzv-id, "
                      "--rdzv-backend and --rdzv-conf (token_file, tls_*)",
                      command, common::printable(given.origin)));
    }
  }
  std::map<std::string, std::string> rendezvousOnly;
  for (const std::string_view name : kRendezvousOptions) {
    const std::string variable = environmentName(optionNamed(name));
    if (const auto it = environment.find(variable); it != environment.end())
      rendezvousOnly.insert(*it);
  }
  addEnvironmentFallbacks(split, rendezvousOnly);
  if (!split.options.contains("rdzv-backend")) {
    const OptionSpec& backend = optionNamed("rdzv-backend");
    split.options.emplace(backend.name, GivenValue{&backend, "c10d", "--rdzv-backend", false});
  }
  const Arguments arguments(std::move(split.options));
  CommandLine result;
  resolveRendezvous(arguments, result);
  return result;
}

}  // namespace ddprun::launcher
