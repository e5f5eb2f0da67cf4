#pragma once
// llama-server's slot files on serve's HTTP port: POST /slots/{id}?action=save|restore with
// {"filename": NAME} writes or reads sequence slot {id}'s cache in --slot-save-path, action=erase
// forgets what the slot holds. Each goes to the serving loop as the protocol's `slot` request over the
// in-process ZeroMQ endpoint (as the OpenAI-style API's completions do), and is answered as
// llama-server answers: {"id_slot", "filename", "n_saved", "n_written", "timings": {"save_ms"}} (restore:
// n_restored, n_read, restore_ms; erase: n_erased); errors in the API's error shape.
#include "server/http_server.hpp"
#include "server/openai_api.hpp"

namespace hotcold::server {

http_reply slots_request(const openai_setup& s, const http_request& req);

}  // namespace hotcold::server
