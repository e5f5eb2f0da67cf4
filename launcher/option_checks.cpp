#include "launcher/option_checks.hpp"

#include <fmt/format.h>

#include "protocol/messages.hpp"
#include "server/sampling_map.hpp"

namespace hotcold::launcher {

void check_sampling_flags(const sampling_params& p) {
  try {
    protocol::check_sampling(server::wire_sampling_of(p, std::nullopt));
  } catch (const std::invalid_argument& e) {
    // The protocol's field names, as the flags are spelt.
    std::string m = e.what();
    for (auto [field, flag] : {std::pair{"\"temperature\"", "--temp"}, std::pair{"\"top_p\"", "--top-p"}, std::pair{"\"min_p\"", "--min-p"},
                               std::pair{"\"repeat_penalty\"", "--repeat-penalty"}, std::pair{"\"repeat_last_n\"", "--repeat-last-n"},
                               std::pair{"\"frequency_penalty\"", "--frequency-penalty"}, std::pair{"\"presence_penalty\"", "--presence-penalty"}})
      if (m.rfind(field, 0) == 0) m = flag + m.substr(std::string(field).size());
    throw std::invalid_argument(m);
  }
}

}  // namespace hotcold::launcher
