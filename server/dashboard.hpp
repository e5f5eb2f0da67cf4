#pragma once
// The dashboard page (server/dashboard/index.html), embedded in the binary at build time.
#include <string_view>

namespace hotcold::server {

std::string_view dashboard_html();

}  // namespace hotcold::server
