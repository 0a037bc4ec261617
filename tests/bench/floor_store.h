// FloorStore: the least a TCPStore server can cost per request on this kernel, as the anchor of
// the store benchmark. One thread, edge-triggered epoll, per wake-up one recv until the socket is
// drained (a short read ends it), every complete request handled, every reply of that read
// leaving in one send; no limits, no timeouts, no backpressure, no logging. It knows only what
// the benchmark sends (SET, GET, ADD, WAIT on present keys; VALIDATE and PING of the 2.x dialect,
// told apart by the first byte as ddprun-rendezvous does) and closes a connection on anything
// else. Whatever a real server does per request beyond the kernel's part shows as the distance
// to this one.
#pragma once

#include <cstdint>

namespace ddprun::bench {

// Listens on 127.0.0.1 (a free port), prints "listening on 127.0.0.1:PORT" and serves until
// killed. Returns 1 (with a line on stderr) if it cannot listen.
int serveFloorStore();

}  // namespace ddprun::bench
