// The two generations of PyTorch's c10d TCPStore protocol that ddprun speaks.
#pragma once

#include <cstdint>
#include <string_view>

namespace ddprun::rendezvous {

enum class WireDialect : std::uint8_t {
  // torch 1.13: no handshake, the 1.13 op table, no CANCEL_WAIT.
  kTorch113,
  // torch 2.x: VALIDATE (magic 0x3C85F7CE) and PING at connect, the 2.x op table.
  kTorch2,
};

// "torch-1.13" or "torch-2.x", for messages.
std::string_view dialectName(WireDialect dialect);

}  // namespace ddprun::rendezvous
