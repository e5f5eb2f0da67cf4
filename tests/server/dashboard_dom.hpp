// The dashboard as headless Chromium leaves it (scripts/install-deps.sh installs chromium), and the
// text of its elements.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tests/server/serve_process.hpp"

namespace hotcold::test {

// Chromium's command ("" when it is not installed).
inline std::string chromium_command() {
  const std::string found = run_capture("command -v chromium || command -v chromium-browser");
  return found.substr(0, found.find('\n'));
}

// The DOM of http://127.0.0.1:PORT/PAGE once Chromium's virtual clock has run `virtual_ms`
// ("" without Chromium); its profile in a folder that is removed after.
inline std::string dashboard_dom(int port, const std::string& page, int virtual_ms, const std::string& window = "1200,900") {
  const std::string chromium = chromium_command();
  if (chromium.empty()) return {};
  static int made = 0;
  const auto profile = fs::temp_directory_path() / ("hotcold-chromium-" + std::to_string(getpid()) + "-" + std::to_string(made++));
  const std::string dom = run_capture("timeout 120 " + chromium + " --headless --no-sandbox --disable-gpu --disable-background-networking --user-data-dir='" +
                                      profile.string() + "' --virtual-time-budget=" + std::to_string(virtual_ms) + " --window-size=" + window +
                                      " --hide-scrollbars --dump-dom 'http://127.0.0.1:" + std::to_string(port) + page + "' 2>/dev/null");
  fs::remove_all(profile);
  return dom;
}

// The text of the element with id `id` in a dumped DOM ("" when absent).
inline std::string element_text(const std::string& dom, const std::string& id) {
  const std::string key = "id=\"" + id + "\"";
  const auto at = dom.find(key);
  if (at == std::string::npos) return "";
  const auto open = dom.find('>', at), close = dom.find('<', open);
  return dom.substr(open + 1, close - open - 1);
}

// The value of attribute `name` of the element with id `id` ("" when absent).
inline std::string element_attribute(const std::string& dom, const std::string& id, const std::string& name) {
  const auto at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const auto end = dom.find('>', at), a = dom.find(name + "=\"", at);
  if (a == std::string::npos || a > end) return "";
  return dom.substr(a + name.size() + 2, dom.find('"', a + name.size() + 2) - a - name.size() - 2);
}

// The element's text as a number (a failure when it is not one).
inline double element_number(const std::string& dom, const std::string& id) {
  const std::string t = element_text(dom, id);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size()) ADD_FAILURE() << "#" << id << " is not a number: '" << t << "'";
  return v;
}

}  // namespace hotcold::test
