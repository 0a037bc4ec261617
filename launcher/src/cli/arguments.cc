#include "cli/arguments.h"

#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <utility>
#include <vector>

#include "cli/cli.h"

namespace ddprun::launcher::cli_detail {
namespace {

namespace po = boost::program_options;

po::options_description programOptions() {
  po::options_description description;
  for (const auto& spec : options()) {
    const std::string name(spec.name);
    switch (spec.kind) {
      case ValueKind::kFlag:
        description.add_options()(name.c_str(), po::bool_switch());
        break;
      case ValueKind::kText:
        description.add_options()(name.c_str(), po::value<std::string>());
        break;
      case ValueKind::kInteger:
        description.add_options()(name.c_str(), po::value<int>());
        break;
      case ValueKind::kNumber:
        description.add_options()(name.c_str(), po::value<double>());
        break;
    }
  }
  return description;
}

std::string conversionMessage(const GivenValue& entry) {
  if (entry.spec->kind == ValueKind::kInteger) {
    return fmt::format("{} is not a whole number; give an integer, e.g. {}", label(entry),
                       example(entry, "1"));
  }
  return fmt::format("{} is not a number; give a number of seconds, e.g. {}", label(entry),
                     example(entry, "30"));
}

}  // namespace

Arguments::Arguments(std::map<std::string_view, GivenValue> given) : given_(std::move(given)) {
  const po::options_description description = programOptions();
  // Tokenising is done (stage 1), so the options go to Program_options as already-parsed
  // name/value pairs: its command-line parser, and with it allow_guessing (prefix matching),
  // never runs, and empty values ("--rdzv-endpoint=", PET_RDZV_CONF="") are kept as such.
  // One store() per option so that a conversion error can name its source.
  for (const auto& [name, entry] : given_) {
    po::parsed_options parsed(&description);
    std::vector<std::string> tokens;
    if (entry.spec->kind == ValueKind::kInteger || entry.spec->kind == ValueKind::kNumber) {
      tokens.emplace_back(trim(entry.value));
    } else if (entry.spec->kind == ValueKind::kText) {
      tokens.push_back(entry.value);
    }
    po::option parsedOption(std::string(name), tokens);
    parsedOption.original_tokens = {entry.origin};
    parsed.options.push_back(std::move(parsedOption));
    try {
      po::store(parsed, values_);
    } catch (const po::error&) {
      throw UsageError(conversionMessage(entry));
    }
  }
  po::notify(values_);
}

const GivenValue* Arguments::given(std::string_view name) const {
  const auto it = given_.find(name);
  return it == given_.end() ? nullptr : &it->second;
}

GivenValue Arguments::givenOr(std::string_view name, std::string_view defaultValue) const {
  if (const auto* entry = given(name)) return *entry;
  return GivenValue{&optionNamed(name), std::string(defaultValue), "--" + std::string(name), false};
}

}  // namespace ddprun::launcher::cli_detail
