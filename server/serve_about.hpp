#pragma once
// What serve's pages say of where things run and how it was started: the places of each layer's parts
// (metrics::set_places, so that each part's seconds are labelled with its device) and the model, its
// placement and the server's settings (/api/stats' "model", "placement", "settings"; the dashboard).
#include <array>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/open.hpp"
#include "server/server_options.hpp"

namespace hotcold::server {

// A row a layer and the head's last, a column a step part (attention, predict, hot_ffn, cold_ffn, ffn,
// output): true where the hot device runs it.
std::vector<std::array<bool, 6>> places_of(const loader::opened_model& l);

// {"model": {file, architecture, activation, mode, predictors, layers, ...}, "placement": {hot_device,
// attention, predictors, dense_ffn, hot_ffn, cold_ffn, head}, "settings": {n_ctx, parallel, ...}}.
nlohmann::json about_of(const loader::opened_model& l, const server_options& o, const std::string& chat_template);

}  // namespace hotcold::server
