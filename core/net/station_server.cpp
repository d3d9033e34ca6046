// station_server.cpp — see station_server.h.
#include "net/station_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <thread>

namespace knot::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxFrame = 512u << 20;  // bytes of one frame (a prefill chunk of a wide model)

using Request = http::request<http::vector_body<uint8_t>>;

std::string query_param(const std::string& target, const std::string& key) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  std::string qs = target.substr(q + 1);
  size_t i = 0;
  while (i <= qs.size()) {
    size_t amp = qs.find('&', i);
    if (amp == std::string::npos) amp = qs.size();
    const std::string kv = qs.substr(i, amp - i);
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == key) return eq == std::string::npos ? "" : kv.substr(eq + 1);
    i = amp + 1;
  }
  return "";
}

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

std::string error_json(const std::string& msg) { return nlohmann::json{{"error", msg}}.dump(); }

template <class Body>
void send(beast::tcp_stream& s, const Request& req, http::status st, const char* type, typename Body::value_type body) {
  http::response<Body> res{st, req.version()};
  res.set(http::field::content_type, type);
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  http::write(s, res);
}

void serve_socket(FatStation& st, tcp::socket sock, Request req) {
  websocket::stream<tcp::socket> ws(std::move(sock));
  ws.read_message_max(kMaxFrame);
  ws.accept(req);
  for (;;) {
    beast::flat_buffer buf;
    beast::error_code ec;
    ws.read(buf, ec);
    if (ec) return;  // the peer hung up
    const auto* p = static_cast<const uint8_t*>(buf.data().data());
    const size_t n = buf.size();
    try {
      auto out = st.handle(p, n);
      ws.binary(true);
      ws.write(asio::buffer(out), ec);
    } catch (const std::exception& e) {
      const std::string msg = nlohmann::json{{"reqId", request_id(p, n)}, {"status", error_status(e)}, {"error", e.what()}}.dump();
      ws.text(true);
      ws.write(asio::buffer(msg), ec);
    }
    if (ec) return;
  }
}

void serve_connection(FatStation& st, tcp::socket sock) {
  beast::tcp_stream stream(std::move(sock));
  beast::flat_buffer buf;
  for (;;) {
    beast::error_code ec;
    http::request_parser<http::vector_body<uint8_t>> parser;
    parser.body_limit(kMaxFrame);
    http::read(stream, buf, parser, ec);
    if (ec) return;
    Request req = parser.release();
    const std::string target(req.target());
    const std::string path = path_of(target);
    try {
      if (req.method() == http::verb::get && (path == "/health" || path == "/stats")) {
        send<http::string_body>(stream, req, http::status::ok, "application/json", st.health().dump());
      } else {
        std::string sid = query_param(target, "sid");
        if (sid.empty()) sid = std::string(req["x-knot-session"]);
        if (sid.empty()) throw StationError(400, "station: no session id (?sid= or x-knot-session header)");
        if (websocket::is_upgrade(req)) {
          serve_socket(st, stream.release_socket(), std::move(req));
          return;
        }
        const auto out = st.handle(req.body().data(), req.body().size());
        send<http::vector_body<uint8_t>>(stream, req, http::status::ok, "application/octet-stream", out);
      }
    } catch (const std::exception& e) {
      send<http::string_body>(stream, req, (http::status)error_status(e), "application/json", error_json(e.what()));
    }
    if (!req.keep_alive()) {
      stream.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
  }
}

}  // namespace

void serve(FatStation& st, const std::string& host, int port, const std::function<void(int)>& ready) {
  asio::io_context ioc;
  tcp::acceptor acc(ioc, tcp::endpoint(asio::ip::make_address(host), (unsigned short)port));
  ready(acc.local_endpoint().port());
  for (;;) {
    tcp::socket sock(ioc);
    acc.accept(sock);
    std::thread([&st, s = std::move(sock)]() mutable {
      try {
        serve_connection(st, std::move(s));
      } catch (const std::exception&) {
        // a connection that failed mid-write: nothing to answer to
      }
    }).detach();
  }
}

}  // namespace knot::net
