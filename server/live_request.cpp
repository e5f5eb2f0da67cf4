#include "server/live_request.hpp"

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

namespace hotcold::server {

std::string slot_file_path(const server_options& o, const protocol::slot_request& s) {
  if (s.action == "erase") return {};
  if (o.slot_save_path.empty()) throw std::invalid_argument("slot files are off: start serve with --slot-save-path DIR");
  const std::string& f = s.filename;
  // A plain name in that folder (as llama-server's check): no separators, no '..', nothing hidden.
  const bool plain = !f.empty() && f.size() <= 255 && f.find_first_of("/\\:") == std::string::npos && f[0] != '.' &&
                     f.find_first_of(std::string("\0", 1)) == std::string::npos;
  if (!plain) throw std::invalid_argument(fmt::format("filename '{}': give a plain file name (no folders, not starting with '.')", f.substr(0, 64)));
  return (std::filesystem::path(o.slot_save_path) / f).string();
}

std::string slot_answer(const actors::slot_event& e, const std::string& id) {
  if (!e.ok) return protocol::encode_error({e.missing ? protocol::error_code::not_found : protocol::error_code::invalid_field, e.error, id});
  return protocol::encode_slot({id, e.action, e.slot, e.n_tokens, static_cast<int64_t>(e.bytes), e.ms});
}

}  // namespace hotcold::server
