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

kv_types parse_cache_types(const std::string& k, const std::string& v) {
  auto one = [](const std::string& name, const char* flag) {
    if (name.empty()) return tensor_type::f16;
    const auto t = tensor_type_from_name(name);
    if (!t || !is_kv_cache_type(*t)) throw std::invalid_argument(fmt::format("{} {}: the KV cache holds f16, f32, q8_0 or q4_0", flag, name));
    return *t;
  };
  return {one(k, "--cache-type-k"), one(v, "--cache-type-v")};
}

}  // namespace hotcold::launcher
