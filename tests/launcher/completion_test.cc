// `ddprun completion bash` (cli/completion.h): the script is written from the option table, so it
// names every option in both spellings, offers every choice after its option, and lists the
// subcommands. tests/packaging/completion_test.sh drives the script in a real bash.
#include "cli/completion.h"

#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

#include "cli/options.h"
#include "cli/subcommands.h"

using ddprun::launcher::bashCompletion;
using ddprun::launcher::ddprunSubcommands;
using ddprun::launcher::Subcommand;
using ddprun::launcher::Subcommands;
namespace cli_detail = ddprun::launcher::cli_detail;

namespace {

bool hasWord(const std::string& text, const std::string& word) {
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const auto boundary = [](char c) {
      return c == ' ' || c == '|' || c == '\'' || c == ')' || c == '\n';
    };
    const bool before = at == 0 || boundary(text[at - 1]);
    const bool after = at + word.size() == text.size() || boundary(text[at + word.size()]);
    if (before && after) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("completion: every option of the table, in both spellings, and each short name",
          "[completion]") {
  const std::string script = bashCompletion(cli_detail::options(), ddprunSubcommands());
  for (const auto& spec : cli_detail::options()) {
    INFO("--" << spec.name);
    CHECK(hasWord(script, "--" + std::string(spec.name)));
    CHECK(hasWord(script, "--" + cli_detail::underscored(spec.name)));
    if (spec.shortName != 0) CHECK(hasWord(script, std::string{'-', spec.shortName}));
  }
  CHECK(script.find("complete -o default -F _ddprun ddprun") != std::string::npos);
}

TEST_CASE("completion: each option's choices and suggestions on the line of its spellings",
          "[completion]") {
  const std::string script = bashCompletion(cli_detail::options(), ddprunSubcommands());
  int lines = 0;
  for (const auto& spec : cli_detail::options()) {
    if (spec.choices.empty() && spec.suggestions.empty()) continue;
    const std::string head = "    --" + std::string(spec.name) + "|";
    const auto start =
        script.find(spec.shortName != 0 ? std::string("    -") + spec.shortName + "|" : head);
    REQUIRE(start != std::string::npos);
    const std::string line = script.substr(start, script.find('\n', start) - start);
    INFO(line);
    for (const auto values : {spec.choices, spec.suggestions}) {
      for (const std::string_view value : values) CHECK(hasWord(line, std::string(value)));
    }
    ++lines;
  }
  CHECK(lines >= 8);
}

TEST_CASE("completion: the subcommands as the first word, and after one only its --help",
          "[completion]") {
  Subcommands table;
  table.add({"status", "s", nullptr});
  table.add({"detach", "d", nullptr});
  const std::string script = bashCompletion(cli_detail::options(), table);
  CHECK(script.find("      status|detach)") != std::string::npos);
  CHECK(script.find("_ddprun_offer 'status detach'") != std::string::npos);
}

TEST_CASE("completion: a word bash would read as syntax is refused", "[completion]") {
  Subcommands table;
  table.add({"x-y", "s", nullptr});
  CHECK_NOTHROW(bashCompletion(cli_detail::options(), table));
  static constexpr std::string_view kBad[] = {"a;b"};
  const cli_detail::OptionSpec rows[] = {{.name = "mode", .choices = kBad}};
  CHECK_THROWS_AS(bashCompletion(rows, table), std::logic_error);
}
