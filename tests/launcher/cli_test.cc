// (placeholder: being written)
#include <catch2/catch.hpp>
TEST_CASE("cli placeholder", "[placeholder]") { SUCCEED(); }
