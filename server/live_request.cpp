#include "server/live_request.hpp"

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/openai_tools.hpp"

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

protocol::token_probs wire_probs(const token_logprobs& p, const vocab& v) {
  protocol::token_probs out{p.logprob, {}};
  for (const auto& [t, lp] : p.top) out.top.push_back({t, v.piece(t), lp});
  return out;
}

std::optional<protocol::token_probs> take_probs(live& lv, int64_t index, const vocab& v) {
  const auto p = lv.probs.find(index);
  if (p == lv.probs.end()) return std::nullopt;
  auto out = wire_probs(p->second, v);
  lv.probs.erase(p);
  return out;
}

std::string done_of(const live& lv, const std::string& finish, const protocol::timings& tm, const std::string& error) {
  protocol::done_reply d{lv.id, finish, lv.prompt_tokens, lv.emitted, tm, std::nullopt, std::nullopt, lv.cached_tokens, std::nullopt, {}};
  if (!lv.stream) d.text = lv.out.text();
  if (finish == "error" && !error.empty()) d.error = error;
  if (lv.tools) {
    tool_stream ts(*lv.tools);
    auto a = ts.add(lv.out.text()), b = ts.finish();
    d.content = a.content + b.content;
    for (auto* o : {&a, &b})
      for (auto& c : o->calls) d.tool_calls.emplace_back(c.name, c.arguments);
  }
  return protocol::encode_done(d);
}

std::string log_line(const live& lv, const std::string& finish, const protocol::timings& tm, const std::string& error) {
  const double decode_s = (tm.total_ms - tm.time_to_first_token_ms) / 1000.0;
  return fmt::format("hotcold serve: request {} from {}: prompt {} tokens ({} cached), {} generated, first token {:.0f} ms, {:.1f} tok/s, {:.0f} ms in all, {}{}",
                     lv.id, lv.to.client, lv.prompt_tokens, lv.cached_tokens, lv.emitted, lv.emitted > 0 ? tm.time_to_first_token_ms : 0.0,
                     lv.emitted > 1 && decode_s > 0 ? static_cast<double>(lv.emitted - 1) / decode_s : 0.0, tm.total_ms, finish,
                     error.empty() ? std::string() : ": " + error);
}

std::string record_line(const live& lv, const std::string& finish) {
  nlohmann::json line{{"arrival_s", lv.arrival_s},     {"request", nlohmann::json::parse(lv.recorded_request)},
                      {"finish", finish},              {"prompt_tokens", lv.prompt_tokens},
                      {"cached_tokens", lv.cached_tokens}, {"generated_tokens", lv.emitted},
                      {"ttft_s", lv.emitted > 0 ? lv.ttft_s : 0.0}, {"itl_s", lv.itl_s},
                      {"e2e_s", std::chrono::duration<double>(clock_type::now() - lv.accepted).count()}};
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> prompt_token_replies(const live& lv, const actors::logits_event& e, const vocab& v) {
  std::vector<std::string> out;
  const auto& x = e.logits;
  if (e.first_position == 0 && !lv.prompt.empty()) out.push_back(protocol::encode_prompt_token(lv.id, 0, lv.prompt[0], v.piece(lv.prompt[0]), nullptr));
  for (int64_t r = 0; r < x.rows; ++r) {
    const int64_t next = e.first_position + r + 1;  // the token this row predicts
    if (next >= static_cast<int64_t>(lv.prompt.size())) break;
    const token_id t = lv.prompt[static_cast<size_t>(next)];
    const auto wire = wire_probs(logprobs_of(std::span<const float>(x.row(r), static_cast<size_t>(x.cols)), t, lv.n_probs), v);
    out.push_back(protocol::encode_prompt_token(lv.id, next, t, v.piece(t), &wire));
  }
  return out;
}

std::string slot_answer(const actors::slot_event& e, const std::string& id) {
  if (!e.ok) return protocol::encode_error({e.missing ? protocol::error_code::not_found : protocol::error_code::invalid_field, e.error, id});
  return protocol::encode_slot({id, e.action, e.slot, e.n_tokens, static_cast<int64_t>(e.bytes), e.ms});
}

}  // namespace hotcold::server
