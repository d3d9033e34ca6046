// http_source.h — a model's bytes for a native station: a local file or HTTP range
// requests (Boost.Beast, plain http:// only), counted.
// Contract: open_model_source(x) takes a path or an http:// URL; the URL's size comes from
// a one-byte range request (Content-Range ".../TOTAL"); every read is one
// `Range: bytes=a-b` GET on a kept-alive connection (reconnected once when the server
// closed it) that must answer 206 with exactly those bytes, else an error naming the URL,
// the range and the status. bytes() / reads() count what was read, for /health.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "container/knot.h"

namespace knot::net {

class CountingSource : public ByteSource {
 public:
  explicit CountingSource(std::unique_ptr<ByteSource> inner) : inner_(std::move(inner)) {}
  uint64_t size() override { return inner_->size(); }
  void read(uint64_t off, uint64_t len, uint8_t* dst) override {
    inner_->read(off, len, dst);
    bytes_ += len, reads_++;
  }
  std::string name() const override { return inner_->name(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t reads() const { return reads_; }

 private:
  std::unique_ptr<ByteSource> inner_;
  std::atomic<uint64_t> bytes_{0}, reads_{0};
};

// http://host[:port]/path ranges.
std::unique_ptr<ByteSource> http_source(const std::string& url);
// A path or an http:// URL, counted. https:// is refused naming the URL.
std::unique_ptr<CountingSource> open_model_source(const std::string& path_or_url);

}  // namespace knot::net
