#pragma once
// The dashboard page (launcher/dashboard/index.html), embedded in the binary at build time.
#include <string_view>

namespace hotcold::launcher {

std::string_view dashboard_html();

}  // namespace hotcold::launcher
