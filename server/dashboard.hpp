#pragma once
// The dashboard page (server/dashboard/index.html), embedded in the binary at build time.
#include <string_view>

namespace hotcold::server {

std::string_view dashboard_html();
// The chat page (server/dashboard/chat.html, GET /chat): a conversation with /v1/chat/completions.
std::string_view chat_html();

}  // namespace hotcold::server
