// The hosts of a launch over ssh (docs/ssh.md): read from --hosts h1,h2 or from a hostfile in
// DeepSpeed's format, then narrowed by --include / --exclude in DeepSpeed's NAME[:SLOT,...]@NAME
// syntax. Pure: text in, hosts out; every bad input is a HostListError whose what() is one line
// naming where it is (the file and line, or the option) and the fix. Slurm's bracket syntax
// (node[01-04]) is not read here: cli/slurm_hostlist.h expands Slurm's node lists.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher::hosts {

class HostListError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One host as listed: its name (what ssh is given) and its slots (GPUs), 0 when not known
// (--hosts gives none).
struct ListedHost {
  std::string name;
  int slots = 0;
};

// One host the job runs on: `devices` are the slots chosen by --include/--exclude (they become
// the host's CUDA_VISIBLE_DEVICES and its number of workers), nothing when all of them are used.
struct SelectedHost {
  std::string name;
  int slots = 0;
  std::optional<std::vector<int>> devices;
};

// "h1,h2,h3" (--hosts): names in order; an empty name, a repeated one or a name ssh would read as
// an option ('-' first) is an error naming `origin` (the option as typed).
std::vector<ListedHost> parseHostList(std::string_view text, std::string_view origin);

// A hostfile's text, DeepSpeed's format: "NAME slots=N" per line, '#' to the end of a line is a
// comment, blank lines are skipped. Anything else (a missing or bad slots=, a repeated host, a
// third word) is an error naming "FILE:LINE".
std::vector<ListedHost> parseHostfile(std::string_view text, std::string_view fileName);

// --include / --exclude (at most one of them may be given: the caller checks): "NAME[:S,S...]@..."
// as DeepSpeed reads it. include: only the hosts named, with only the slots listed where listed;
// exclude: every host but those named without slots, and without the slots listed where listed.
// An unknown host, a slot the host does not have, or a spec that leaves no host is an error
// naming `origin`. Slots of a host whose count is not known (--hosts) may be included, not
// excluded.
enum class SelectionKind { kInclude, kExclude };
std::vector<SelectedHost> selectHosts(const std::vector<ListedHost>& listed, SelectionKind kind,
                                      std::string_view spec, std::string_view origin);
// Every listed host, all its slots.
std::vector<SelectedHost> allHosts(const std::vector<ListedHost>& listed);

// The words of `text` between blanks (spaces, tabs, CR, LF): a hostfile line's, and the ssh
// options of --ssh-options / DDPRUN_SSH_OPTIONS ("-i key -o Port=2222"; no quoting).
std::vector<std::string_view> blankSeparatedWords(std::string_view text);

}  // namespace ddprun::launcher::hosts
