#include "launcher/option_checks.hpp"

#include <charconv>

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

std::vector<std::string> short_spellings(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    for (auto [short_name, long_name] : {std::pair{"-ctk", "--cache-type-k"}, std::pair{"-ctv", "--cache-type-v"}}) {
      const std::string s = short_name;
      if (i > 0 && (a == s || a.rfind(s + "=", 0) == 0)) a = long_name + a.substr(s.size());
    }
    out.push_back(std::move(a));
  }
  return out;
}

CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, bool& given, const std::string& help) {
  return cmd->add_option_function<std::string>(
      "--seed",
      [&seed, &given](const std::string& text) {
        if (text == "-1") {
          given = false;
          return;
        }
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size())
          throw CLI::ValidationError("--seed", fmt::format("'{}' is not a seed: a whole number from 0 to 18446744073709551615, or -1 for a random one", text));
        seed = v, given = true;
      },
      help);
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
