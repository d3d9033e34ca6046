// station_server.h — a FatStation (fat_station.h) served over HTTP and WebSocket with
// Boost.Beast, the way workers/station serves its Durable Object:
//   GET /health, GET /stats     the station's config, layers, sessions, memory (JSON; /stats
//                               is the Worker station's name for it, read by the mesh's stats)
//   POST /?sid=S                one frame in the body, the answer frame as the body;
//                               an error is {"error": message} with its status
//   GET (Upgrade: websocket)    /link?sid=S: every binary message is a frame, answered by a
//                               binary frame, or a text message {"reqId","status","error"}
//                               (workers/lib/socket.mjs)
// A request without a session id (?sid= or x-knot-session) is the Worker's 400.
// One thread per connection; frames compute one at a time (FatStation's lock).
// Contract: serve() binds host:port (0: a free port), calls ready(port) once listening,
// and returns only when the acceptor fails; stop() (e.g. from a SIGTERM handler thread)
// closes the acceptor.
#pragma once
#include <functional>
#include <string>

#include "net/fat_station.h"

namespace knot::net {

void serve(FatStation& st, const std::string& host, int port, const std::function<void(int)>& ready);

}  // namespace knot::net
