// Stage 2 of the command line: the given values (command line and PET_) converted to their types
// by Boost.Program_options, each conversion error a UsageError that names the value's source.
#pragma once

#include <boost/program_options/variables_map.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "cli/given_values.h"

namespace ddprun::launcher::cli_detail {

class Arguments {
 public:
  // Throws UsageError for a value that is not of its option's type.
  explicit Arguments(std::map<std::string_view, GivenValue> given);

  // The option as given, or nullptr.
  const GivenValue* given(std::string_view name) const;
  bool flag(std::string_view name) const { return given(name) != nullptr; }
  // The typed value (int for kInteger, double for kNumber, std::string for kText), or nothing.
  template <typename T>
  std::optional<T> value(std::string_view name) const {
    const auto it = values_.find(std::string(name));
    if (it == values_.end() || it->second.empty()) return std::nullopt;
    return it->second.as<T>();
  }
  // The value as given, or a stand-in carrying the default, so that messages about defaults
  // read the same as about given values.
  GivenValue givenOr(std::string_view name, std::string_view defaultValue) const;

 private:
  std::map<std::string_view, GivenValue> given_;
  boost::program_options::variables_map values_;
};

}  // namespace ddprun::launcher::cli_detail
