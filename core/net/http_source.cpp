// http_source.cpp — see http_source.h.
#include "net/http_source.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstring>

#include "kernels/common.h"

namespace knot::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

class HttpSource : public ByteSource {
 public:
  explicit HttpSource(const std::string& url) : url_(url) {
    const std::string rest = url.substr(7);  // after http://
    const size_t slash = rest.find('/');
    const std::string hostport = rest.substr(0, slash);
    target_ = slash == std::string::npos ? "/" : rest.substr(slash);
    const size_t colon = hostport.rfind(':');
    host_ = colon == std::string::npos ? hostport : hostport.substr(0, colon);
    port_ = colon == std::string::npos ? "80" : hostport.substr(colon + 1);
    if (host_.empty()) fail(url + ": no host in the URL");
    uint8_t b;
    get(0, 1, &b, &size_);
  }
  uint64_t size() override { return size_; }
  void read(uint64_t off, uint64_t len, uint8_t* dst) override {
    if (off + len > size_ || off + len < off)
      fail(url_ + ": read [" + std::to_string(off) + ", " + std::to_string(off + len) + ") past the end (" +
           std::to_string(size_) + " bytes)");
    if (len) get(off, len, dst, nullptr);
  }
  std::string name() const override { return url_; }

 private:
  void connect() {
    stream_ = std::make_unique<beast::tcp_stream>(ioc_);
    tcp::resolver res(ioc_);
    stream_->connect(res.resolve(host_, port_));
  }
  // One range GET; total (when given) from Content-Range.
  void get(uint64_t off, uint64_t len, uint8_t* dst, uint64_t* total) {
    const std::string range = "bytes=" + std::to_string(off) + "-" + std::to_string(off + len - 1);
    for (int attempt = 0;; attempt++) {
      try {
        if (!stream_) connect();
        http::request<http::empty_body> req{http::verb::get, target_, 11};
        req.set(http::field::host, host_);
        req.set(http::field::range, range);
        req.keep_alive(true);
        http::write(*stream_, req);
        beast::flat_buffer buf;
        http::response_parser<http::vector_body<uint8_t>> p;
        p.body_limit(len + 1);
        http::read(*stream_, buf, p);
        auto& res = p.get();
        if (res.result_int() != 206)
          fail(url_ + ": range " + range + " answered HTTP " + std::to_string(res.result_int()) + " (want 206)");
        if (res.body().size() != len)
          fail(url_ + ": range " + range + " answered " + std::to_string(res.body().size()) + " bytes, want " + std::to_string(len));
        if (total) {
          const std::string cr(res[http::field::content_range]);
          const size_t s = cr.rfind('/');
          if (s == std::string::npos || s + 1 >= cr.size() || cr[s + 1] == '*')
            fail(url_ + ": no total size in Content-Range \"" + cr + "\"");
          *total = std::stoull(cr.substr(s + 1));
        }
        std::memcpy(dst, res.body().data(), len);
        if (!res.keep_alive()) stream_.reset();
        return;
      } catch (const knot::Error&) {
        throw;
      } catch (const std::exception& e) {
        stream_.reset();  // a kept-alive connection the server closed: once more on a new one
        if (attempt >= 1) fail(url_ + ": range " + range + ": " + e.what());
      }
    }
  }

  std::string url_, host_, port_, target_;
  uint64_t size_ = 0;
  asio::io_context ioc_;
  std::unique_ptr<beast::tcp_stream> stream_;
};

}  // namespace

std::unique_ptr<ByteSource> http_source(const std::string& url) { return std::make_unique<HttpSource>(url); }

std::unique_ptr<CountingSource> open_model_source(const std::string& x) {
  if (x.rfind("https://", 0) == 0) fail(x + ": https is not supported by the native station (serve the model over http://)");
  if (x.rfind("http://", 0) == 0) return std::make_unique<CountingSource>(http_source(x));
  return std::make_unique<CountingSource>(std::make_unique<FileSource>(x));
}

}  // namespace knot::net
