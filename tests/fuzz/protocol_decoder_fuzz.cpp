// libFuzzer target for the client protocol's decoders: any bytes give a request or a protocol_error
// (never an exception, a crash or a read out of bounds), a decoded request keeps the limits and is
// encoded back to a frame that decodes to the same request; read as a reply (what a client does with
// whatever arrives), any bytes give a reply or a protocol_error too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "protocol/messages.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hotcold::protocol;
  const limits l;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto reply = decode_reply(bytes); auto* rep = std::get_if<hotcold::protocol::reply>(&reply)) (void)encode_reply(*rep);
  auto r = decode_request(bytes, l);
  if (auto* req = std::get_if<request>(&r)) {
    const std::string frame = encode_request(*req);
    limits roomy = l;  // every sampling field written: a frame near the size limit may grow past it
    roomy.max_frame_bytes += 4096;
    auto again = decode_request(frame, roomy);
    if (!std::holds_alternative<request>(again) || encode_request(std::get<request>(again)) != frame) std::abort();
    const auto& id = request_id(*req);
    if (id.empty() || id.size() > l.max_id_bytes) std::abort();
    if (auto* g = std::get_if<generate_request>(req)) {
      if (g->prompt.has_value() == !g->tokens.empty()) std::abort();  // exactly one of the two
      if (g->tokens.size() > l.max_tokens_in || g->stop.size() > l.max_stop || g->n_predict < -1 || g->n_predict > l.max_n_predict) std::abort();
      (void)encode_accepted(id, static_cast<int64_t>(g->tokens.size()), g->params.seed.value_or(0));
    }
  } else {
    const auto& e = std::get<protocol_error>(r);
    if (e.message.empty()) std::abort();
    (void)encode_error(e);
  }
  return 0;
}
