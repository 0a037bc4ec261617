// The agent's reading of TORCHELASTIC_HEALTH_CHECK_PORT, DDPRUN_HEALTH_CHECK_ADDR and
// DDPRUN_HEALTH_CHECK_HOSTS (agent/health_endpoint.h): what is served where, and the one line for
// a bad value.
#include "agent/health_endpoint.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "agent/startup_error.h"

using ddprun::launcher::healthEndpointOf;
using ddprun::launcher::StartupError;
using Environment = std::map<std::string, std::string>;

TEST_CASE("health endpoint: unset or empty serves nothing") {
  CHECK_FALSE(healthEndpointOf({}));
  CHECK_FALSE(healthEndpointOf({{"TORCHELASTIC_HEALTH_CHECK_PORT", ""}}));
  CHECK_FALSE(healthEndpointOf({{"DDPRUN_HEALTH_CHECK_ADDR", "0.0.0.0"}}));
}

TEST_CASE("health endpoint: a port on loopback, 0 for a free one, the address when given") {
  const auto plain = healthEndpointOf({{"TORCHELASTIC_HEALTH_CHECK_PORT", "8080"}});
  REQUIRE(plain);
  CHECK(plain->port == 8080);
  CHECK(plain->host == "127.0.0.1");
  CHECK(healthEndpointOf({{"TORCHELASTIC_HEALTH_CHECK_PORT", "0"}})->port == 0);
  CHECK(healthEndpointOf({{"TORCHELASTIC_HEALTH_CHECK_PORT", "65535"}})->port == 65535);
  const auto wide = healthEndpointOf(
      {{"TORCHELASTIC_HEALTH_CHECK_PORT", "9000"}, {"DDPRUN_HEALTH_CHECK_ADDR", "0.0.0.0"}});
  CHECK(wide->host == "0.0.0.0");
}

TEST_CASE("health endpoint: what is no port number is one line naming the variable") {
  for (const char* bad : {"65536", "-1", "80x", " 80", "http", "8080.0", "99999999999999999999"}) {
    INFO(bad);
    try {
      healthEndpointOf({{"TORCHELASTIC_HEALTH_CHECK_PORT", bad}});
      FAIL("accepted");
    } catch (const StartupError& error) {
      const std::string line = error.what();
      CHECK(line.find("TORCHELASTIC_HEALTH_CHECK_PORT='") == 0);
      CHECK(line.find("is not a port number") != std::string::npos);
      CHECK(line.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("health endpoint: an address that is no IP address is one line naming its variable") {
  for (const char* bad : {"localhost", "0.0.0.0:80", "256.1.1.1", "eth0"}) {
    INFO(bad);
    try {
      healthEndpointOf(
          {{"TORCHELASTIC_HEALTH_CHECK_PORT", "0"}, {"DDPRUN_HEALTH_CHECK_ADDR", bad}});
      FAIL("accepted");
    } catch (const StartupError& error) {
      CHECK(std::string(error.what()).find("DDPRUN_HEALTH_CHECK_ADDR='") == 0);
    }
  }
  const auto six = healthEndpointOf(
      {{"TORCHELASTIC_HEALTH_CHECK_PORT", "0"}, {"DDPRUN_HEALTH_CHECK_ADDR", "::1"}});
  CHECK(six->host == "::1");
}

TEST_CASE("health endpoint: DDPRUN_HEALTH_CHECK_HOSTS names Host names, a bad one is one line") {
  const auto named = healthEndpointOf(
      {{"TORCHELASTIC_HEALTH_CHECK_PORT", "0"}, {"DDPRUN_HEALTH_CHECK_HOSTS", "probe.svc,node-3"}});
  CHECK(named->hostNames == std::vector<std::string>{"probe.svc", "node-3"});
  CHECK(healthEndpointOf({{"TORCHELASTIC_HEALTH_CHECK_PORT", "0"}})->hostNames.empty());
  for (const char* bad : {"a b", "evil.example/x", "10.0.0.1", "a..b"}) {
    INFO(bad);
    try {
      healthEndpointOf(
          {{"TORCHELASTIC_HEALTH_CHECK_PORT", "0"}, {"DDPRUN_HEALTH_CHECK_HOSTS", bad}});
      FAIL("accepted");
    } catch (const StartupError& error) {
      const std::string line = error.what();
      CHECK(line.find("DDPRUN_HEALTH_CHECK_HOSTS: '") == 0);
      CHECK(line.find('\n') == std::string::npos);
    }
  }
}
