// The endpoint list of --rdzv-endpoint for etcd: "host:port[,host:port...]", as torchrun's etcd
// backends take it (their `protocol` conf key aside: the scheme is written on each entry here).
#include <algorithm>
#include <cctype>

#include "ddprun/common/port.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/etcd_client.h"

namespace ddprun::rendezvous::etcd {
namespace {

constexpr std::string_view kForm =
    "write host:port, e.g. 127.0.0.1:2379 (port 2379 when left out; http:// or https:// in front "
    "if needed; [::1]:2379 for IPv6; several separated by commas)";

[[noreturn]] void bad(std::string_view entry, std::string_view problem) {
  throw EtcdEndpointError("etcd endpoint '" + common::printablePrefix(entry) +
                          "': " + std::string(problem) + "; " + std::string(kForm));
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

bool startsWithNoCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), text.begin(), [](char lower, char c) {
           return std::tolower(static_cast<unsigned char>(c)) == lower;
         });
}

// A host name or an IPv4 address: letters, digits, '-', '.', '_' (names of containers and
// Kubernetes services have '_' and '-'). Anything else (a space, '/', '@', '%') is a typo
// or a URL part this parser does not take.
bool plausibleHost(std::string_view host) {
  return !host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

// An entry with user information ("http://user:PASSWORD@host") is refused before anything else
// quotes it, and quoted with that part as "***": the password is in no message.
void refuseUserinfo(std::string_view entry) {
  if (entry.find('@') == std::string_view::npos) return;
  throw EtcdEndpointError(
      "etcd endpoint '" + common::printablePrefix(common::withoutUserinfo(entry)) +
      "': a user name or password does not go in the endpoint; give the user as username=NAME and "
      "its password in a file only you can read as password_file=PATH in --rdzv-conf");
}

EtcdEndpoint parseOne(std::string_view entry) {
  EtcdEndpoint endpoint;
  std::string_view rest = entry;
  if (startsWithNoCase(rest, "http://")) {
    rest.remove_prefix(7);
  } else if (startsWithNoCase(rest, "https://")) {
    endpoint.scheme = EtcdEndpoint::Scheme::kHttps;
    rest.remove_prefix(8);
  } else if (rest.find("://") != std::string_view::npos) {
    bad(entry, "the scheme must be http:// or https://");
  }
  // One trailing '/' is what a copied URL often has; any other path is not an etcd endpoint.
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) bad(entry, "a path is not part of an endpoint");
  std::string_view host = rest;
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) bad(entry, "the '[' of an IPv6 address is not closed");
    host = rest.substr(1, close - 1);
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad(entry, "only ':port' may follow ']'");
      port = after.substr(1);
      if (port.empty()) bad(entry, "the port after ':' is missing");
    }
    if (host.empty() || !std::all_of(host.begin(), host.end(), [](char c) {
          return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
        })) {
      bad(entry, "the text in brackets is not an IPv6 address");
    }
  } else {
    const auto colon = rest.find(':');
    if (colon != std::string_view::npos) {
      if (rest.find(':', colon + 1) != std::string_view::npos) {
        bad(entry, "an IPv6 address must be written in brackets");
      }
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      if (port.empty()) bad(entry, "the port after ':' is missing");
    }
    if (host.empty()) bad(entry, "the host is missing");
    if (!plausibleHost(host))
      bad(entry, "the host may hold only letters, digits, '-', '.' and '_'");
  }
  endpoint.host = std::string(host);
  if (!port.empty()) {
    const auto value = common::parsePort(port);
    if (!value || *value == 0) bad(entry, "the port must be a number from 1 to 65535");
    endpoint.port = *value;
  }
  return endpoint;
}

}  // namespace

std::string EtcdEndpoint::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(scheme == Scheme::kHttps ? "https://" : "http://") + (v6 ? "[" : "") + host +
         (v6 ? "]" : "") + ":" + std::to_string(port);
}

std::vector<EtcdEndpoint> parseEtcdEndpoints(std::string_view text) {
  std::vector<EtcdEndpoint> endpoints;
  // Every entry first: another entry's message must not quote a password (one written with a
  // ',' in it is split across two entries).
  for (std::size_t start = 0; start <= text.size();) {
    const auto comma = std::min(text.find(',', start), text.size());
    refuseUserinfo(trimmed(text.substr(start, comma - start)));
    start = comma + 1;
  }
  if (trimmed(text).empty()) bad(text, "no endpoint is given");
  std::size_t start = 0;
  for (;;) {
    const auto comma = text.find(',', start);
    const std::string_view entry = trimmed(text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (entry.empty()) bad(text, "an entry between commas is empty");
    EtcdEndpoint endpoint = parseOne(entry);
    if (std::find(endpoints.begin(), endpoints.end(), endpoint) != endpoints.end()) {
      bad(entry, "it is listed twice");
    }
    endpoints.push_back(std::move(endpoint));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return endpoints;
}

}  // namespace ddprun::rendezvous::etcd
