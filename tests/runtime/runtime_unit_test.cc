// The worker runtime's pure logic: 16-bit float conversions, the host reductions Gloo runs, and
// RuntimeOptions read from the environment ddprun sets.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/runtime/process_group.h"
#include "host_reduce.h"

using namespace ddprun::runtime;

TEST_CASE("float16 conversion rounds to nearest even and keeps inf, NaN and subnormals") {
  CHECK(toHalf(1.0f).bits == 0x3C00);
  CHECK(toHalf(-2.0f).bits == 0xC000);
  CHECK(toHalf(65504.0f).bits == 0x7BFF);               // the largest half
  CHECK(toHalf(65520.0f).bits == 0x7C00);               // rounds up to inf
  CHECK(toHalf(std::ldexp(1.0f, -24)).bits == 0x0001);  // the smallest subnormal
  CHECK(toHalf(std::ldexp(1.0f, -26)).bits == 0x0000);  // below half of it: zero
  CHECK(toHalf(2049.0f).bits == toHalf(2048.0f).bits);  // tie -> even
  CHECK(toFloat(toHalf(2051.0f)) == 2052.0f);           // tie -> even (up)
  CHECK(std::isnan(toFloat(toHalf(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(toFloat(toHalf(std::numeric_limits<float>::infinity()))));
  // Every finite half survives the round trip through float exactly.
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const Half h{static_cast<std::uint16_t>(bits)};
    const float f = toFloat(h);
    if (std::isnan(f)) continue;
    REQUIRE(toHalf(f).bits == h.bits);
  }
}

TEST_CASE("bfloat16 conversion rounds to nearest even") {
  CHECK(toBFloat16(1.0f).bits == 0x3F80);
  CHECK(toFloat(toBFloat16(257.0f)) == 256.0f);  // tie -> even
  CHECK(toFloat(toBFloat16(259.0f)) == 260.0f);  // tie -> even (up)
  CHECK(std::isnan(toFloat(toBFloat16(std::nanf("")))));
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const BFloat16 b{static_cast<std::uint16_t>(bits)};
    const float f = toFloat(b);
    if (std::isnan(f)) continue;
    REQUIRE(toBFloat16(f).bits == b.bits);
  }
}

TEST_CASE("host reductions compute every op for every type") {
  const float a[] = {1, -2, 3};
  const float b[] = {4, 5, -6};
  float out[3];
  detail::hostReduceFunction(DataType::kFloat32, ReduceOp::kSum)(out, a, b, 3);
  CHECK((out[0] == 5 && out[1] == 3 && out[2] == -3));
  detail::hostReduceFunction(DataType::kFloat32, ReduceOp::kProduct)(out, a, b, 3);
  CHECK((out[0] == 4 && out[1] == -10 && out[2] == -18));
  detail::hostReduceFunction(DataType::kFloat32, ReduceOp::kMin)(out, a, b, 3);
  CHECK((out[0] == 1 && out[1] == -2 && out[2] == -6));
  detail::hostReduceFunction(DataType::kFloat32, ReduceOp::kMax)(out, a, b, 3);
  CHECK((out[0] == 4 && out[1] == 5 && out[2] == 3));

  const std::int64_t big[] = {std::int64_t{1} << 40, -7};
  const std::int64_t one[] = {1, 2};
  std::int64_t sum[2];
  detail::hostReduceFunction(DataType::kInt64, ReduceOp::kSum)(sum, big, one, 2);
  CHECK((sum[0] == (std::int64_t{1} << 40) + 1 && sum[1] == -5));
  detail::divideElements(sum, 2, DataType::kInt64, 2);
  CHECK(sum[1] == -2);  // truncated toward zero, as documented for kAvg on integers

  const Half h1[] = {toHalf(1.5f)};
  const Half h2[] = {toHalf(2.25f)};
  Half hs[1];
  detail::hostReduceFunction(DataType::kFloat16, ReduceOp::kSum)(hs, h1, h2, 1);
  CHECK(toFloat(hs[0]) == 3.75f);
  const BFloat16 b1[] = {toBFloat16(3.0f)};
  const BFloat16 b2[] = {toBFloat16(-5.0f)};
  BFloat16 bm[1];
  detail::hostReduceFunction(DataType::kBFloat16, ReduceOp::kMin)(bm, b1, b2, 1);
  CHECK(toFloat(bm[0]) == -5.0f);
}

namespace {

// Sets environment variables for one test and restores the previous values afterwards.
class ScopedEnvironment {
 public:
  ScopedEnvironment(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const char* name : kNames) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(name);
    }
    for (const auto& [name, value] : values) ::setenv(name, value, 1);
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  static constexpr const char* kNames[] = {"RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "TORCHELASTIC_RUN_ID",
                                           "DDPRUN_GENERATION",
                                           "TORCHELASTIC_RESTART_COUNT",
                                           "TORCHELASTIC_USE_AGENT_STORE",
                                           "DDPRUN_BACKEND",
                                           "DDPRUN_TIMEOUT",
                                           "DDPRUN_GLOO_ADDR",
                                           "GLOO_SOCKET_IFNAME",
                                           "DDPRUN_DEVICE"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string errorOf(std::initializer_list<std::pair<const char*, const char*>> values) {
  ScopedEnvironment environment(values);
  try {
    RuntimeOptions::fromEnvironment();
  } catch (const RuntimeError& error) {
    CHECK(error.kind() == RuntimeError::Kind::kInvalidArgument);
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("options come from the environment ddprun sets") {
  ScopedEnvironment environment({{"RANK", "3"},
                                 {"WORLD_SIZE", "8"},
                                 {"LOCAL_RANK", "1"},
                                 {"MASTER_ADDR", "10.0.0.7"},
                                 {"MASTER_PORT", "29511"},
                                 {"TORCHELASTIC_RUN_ID", "job42"},
                                 {"TORCHELASTIC_RESTART_COUNT", "2"},
                                 {"DDPRUN_GENERATION", "5"},
                                 {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                 {"DDPRUN_BACKEND", "Gloo"},
                                 {"DDPRUN_TIMEOUT", "2.5"}});
  const auto options = RuntimeOptions::fromEnvironment();
  CHECK(options.rank == 3);
  CHECK(options.worldSize == 8);
  CHECK(options.localRank == 1);
  CHECK(options.masterAddr == "10.0.0.7");
  CHECK(options.masterPort == 29511);
  CHECK(options.runId == "job42");
  CHECK(options.generation == 5);  // the round, which also changes on membership changes
  CHECK_FALSE(options.hostStore);  // the agent hosts the store
  CHECK(options.backend == BackendKind::kGloo);
  CHECK(options.timeout == std::chrono::milliseconds(2500));
}

TEST_CASE("without an agent store rank 0 hosts it, as torch's env:// does") {
  ScopedEnvironment environment({{"RANK", "0"},
                                 {"WORLD_SIZE", "2"},
                                 {"MASTER_PORT", "29500"},
                                 {"TORCHELASTIC_RESTART_COUNT", "4"}});
  const auto options = RuntimeOptions::fromEnvironment();
  CHECK(options.hostStore);
  CHECK(options.generation == 4);
  CHECK(options.masterAddr == "127.0.0.1");
  CHECK(options.runId == "none");
}

TEST_CASE("a missing or malformed variable is one line naming it and the fix") {
  CHECK_THAT(errorOf({{"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
             Catch::Contains("RANK is not set: start the program with ddprun"));
  CHECK_THAT(errorOf({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
             Catch::Contains("RANK='x' is not an integer"));
  CHECK_THAT(errorOf({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
             Catch::Contains("RANK=2 is not below WORLD_SIZE=2"));
  CHECK_THAT(
      errorOf(
          {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}, {"DDPRUN_TIMEOUT", "soon"}}),
      Catch::Contains("DDPRUN_TIMEOUT='soon' is not a positive number of seconds"));
  CHECK_THAT(
      errorOf(
          {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}, {"DDPRUN_BACKEND", "mpi"}}),
      Catch::Contains("unknown backend 'mpi': use auto, gloo or nccl"));
}
