#include "server/serve_about.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "engine/device_layers.hpp"
#include "model/arch.hpp"

namespace hotcold::server {

std::vector<std::array<bool, 6>> places_of(const loader::opened_model& l) {
  const int64_t n = l.m->hp().n_layer;
  std::vector<std::array<bool, 6>> out(static_cast<size_t>(n + 1), std::array<bool, 6>{});
  const auto* d = l.device.get();
  for (int64_t i = 0; i < n; ++i) {
    auto& row = out[static_cast<size_t>(i)];
    row[2] = l.hot != nullptr;  // (hot FFN rows)
    if (!d) continue;
    row[0] = d->attention(i), row[1] = d->predictor(i), row[4] = d->ffn(i);
  }
  out.back()[5] = d && d->output();
  return out;
}

nlohmann::json about_of(const loader::opened_model& l, const server_options& o, const std::string& chat_template) {
  const auto& hp = l.m->hp();
  const auto places = places_of(l);
  const bool on_device = l.dev && l.dev->kind() != devices::device_kind::cpu;
  const std::string dev = on_device ? l.dev->name() : "cpu";
  // "sim (4 of 4 layers)", "cpu", or "sim (2 of 4 layers), the rest cpu".
  auto where = [&](size_t part) {
    int64_t k = 0;
    for (int64_t i = 0; i < hp.n_layer; ++i) k += places[static_cast<size_t>(i)][part];
    if (k == 0) return std::string("cpu");
    if (k == hp.n_layer) return fmt::format("{} ({} of {} layers)", dev, k, hp.n_layer);
    return fmt::format("{} ({} of {} layers), the rest cpu", dev, k, hp.n_layer);
  };
  const auto& w0 = l.m->weights().layers.front();
  const tensor_type weights = w0.ffn_up.data ? w0.ffn_up.type : w0.wo.type;
  nlohmann::json model{{"file", std::filesystem::path(l.m->path()).filename().string()},
                       {"path", l.m->path()},
                       {"architecture", architecture_name(hp.arch)},
                       {"activation", activation_name(hp.act)},
                       {"weights", tensor_type_name(weights)},
                       {"bytes", l.m->weight_bytes()},
                       {"layers", hp.n_layer},
                       {"embd", hp.n_embd},
                       {"ffn", hp.n_ff},
                       {"heads", hp.n_head},
                       {"kv_heads", hp.n_head_kv},
                       {"vocab", hp.n_vocab},
                       {"experts", hp.n_expert},
                       {"mode", ffn_mode_name(l.ctx->mode())},
                       {"predictors", l.m->has_predictors() && l.ctx->mode() == ffn_mode::sparse}};
  nlohmann::json placement{{"hot_device", on_device ? dev : "none"},
                           {"attention", where(0)},
                           {"predictors", l.m->has_predictors() ? where(1) : "none"},
                           {"hot_ffn", l.hot ? dev : "none"},
                           {"cold_ffn", "cpu"},
                           {"dense_ffn", where(4)},
                           {"head", places.back()[5] ? dev : "cpu"}};
  nlohmann::json settings{{"n_ctx", l.ctx->n_ctx()},
                          {"parallel", l.ctx->n_seq()},
                          {"threads", l.ctx->pool().size()},
                          {"kv_cache", kv_types_name(l.ctx->cache_types())},
                          {"max_queue", o.max_queue},
                          {"max_tokens", o.max_tokens},
                          {"max_prompt_tokens", o.max_prompt_tokens},
                          {"context_shift", o.context_shift},
                          {"chat_template", chat_template},
                          {"http", o.http},
                          {"zmq", o.endpoint.empty() ? "none" : o.endpoint},
                          {"api_keys", !o.api_keys.empty() || !o.api_key_file.empty()}};
  return {{"model", std::move(model)}, {"placement", std::move(placement)}, {"settings", std::move(settings)}};
}

}  // namespace hotcold::server
