#include "server/dashboard.hpp"

extern "C" const char hotcold_dashboard_html[];
extern "C" const char hotcold_dashboard_html_end[];
extern "C" const char hotcold_chat_html[];
extern "C" const char hotcold_chat_html_end[];

namespace hotcold::server {

std::string_view dashboard_html() { return {hotcold_dashboard_html, static_cast<size_t>(hotcold_dashboard_html_end - hotcold_dashboard_html)}; }
std::string_view chat_html() { return {hotcold_chat_html, static_cast<size_t>(hotcold_chat_html_end - hotcold_chat_html)}; }

}  // namespace hotcold::server
