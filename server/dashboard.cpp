#include "server/dashboard.hpp"

extern "C" const char hotcold_dashboard_html[];
extern "C" const char hotcold_dashboard_html_end[];

namespace hotcold::server {

std::string_view dashboard_html() { return {hotcold_dashboard_html, static_cast<size_t>(hotcold_dashboard_html_end - hotcold_dashboard_html)}; }

}  // namespace hotcold::server
