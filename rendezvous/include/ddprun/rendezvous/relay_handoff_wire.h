/* The relay's handoff: what the preloaded shim (src/relay/handoff_shim.c) and the relay
 * (src/relay/loopback_relay.cc) say to each other, and the variable the agent gives its workers.
 * C as well as C++: the shim is a C library with nothing but libc.
 *
 * A worker started with the shim (LD_PRELOAD) finds, in DDPRUN_RELAY_HANDOFF, the relay's port
 * and the path of the relay's handoff socket, "<port>:<path>". When the worker connects a TCP
 * socket to 127.0.0.1:<port> (its MASTER_ADDR:MASTER_PORT under a token), the shim connects to
 * the handoff socket instead and waits for one byte. kHandoffTaken comes with a descriptor
 * (SCM_RIGHTS): a connection to the job's store that the relay has connected and proved the
 * token on. The shim puts it in place of the worker's socket, and from then on the worker talks
 * to the store directly, with no hop in between. Anything else (another byte, no descriptor, the
 * socket closed or missing, no answer in time) and the shim connects the worker's socket to the
 * relay as asked, so a handoff that cannot be made costs the job nothing but the try.
 */
#ifndef DDPRUN_RELAY_HANDOFF_WIRE_H
#define DDPRUN_RELAY_HANDOFF_WIRE_H

#define DDPRUN_RELAY_HANDOFF_ENV "DDPRUN_RELAY_HANDOFF"
/* The reply byte that comes with the store connection. */
#define DDPRUN_HANDOFF_TAKEN 'H'
/* The reply byte that says: connect to the relay instead (no round yet, or the link failed). */
#define DDPRUN_HANDOFF_RELAY 'R'
/* How long the shim waits for the reply, in milliseconds: past the relay's own bound on
 * connecting and proving the token (RelayOptions::connectTimeout, 30 s), so the relay's answer
 * comes first. */
#define DDPRUN_HANDOFF_WAIT_MS 35000

#endif
