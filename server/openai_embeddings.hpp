#pragma once
// POST /v1/embeddings (serve --embeddings): each input — a string, a list of strings, a list of token
// ids or a list of such lists — tokenized as a completion's prompt is, run through the model and
// pooled (serve --pooling), L2-normalized; as floats or, as the official clients ask, base64 of
// little-endian float32 (encoding_format).
#include "server/http_server.hpp"
#include "server/openai_request.hpp"

namespace hotcold::server {

// The answer to a body whose model was already checked.
http_reply embeddings_answer(const openai_setup& s, const api_json& body);

}  // namespace hotcold::server
