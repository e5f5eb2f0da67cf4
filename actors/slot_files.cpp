#include "actors/slot_files.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hotcold::actors {

namespace {
constexpr char magic[8] = {'H', 'C', 'S', 'L', 'O', 'T', '0', '1'};
}  // namespace

uint64_t save_slot(const kv_cache& kv, const std::string& model_identity, int64_t slot, std::span<const token_id> tokens, const std::string& path) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const std::string header = nlohmann::json{{"model", model_identity},          {"cache_type_k", lower_type_name(kv.types().k)},
                                            {"cache_type_v", lower_type_name(kv.types().v)}, {"n_layer", kv.n_layer()},
                                            {"k_row_bytes", kv.row_bytes(false)}, {"v_row_bytes", kv.row_bytes(true)},
                                            {"n_tokens", n}}
                                 .dump();
  const std::string part = path + ".part";  // (renamed when whole: a reader never sees half a file)
  std::ofstream out(part, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(fmt::format("slot file {}: cannot be written ({})", path, std::strerror(errno)));
  const uint32_t header_bytes = static_cast<uint32_t>(header.size());
  out.write(magic, sizeof magic);
  out.write(reinterpret_cast<const char*>(&header_bytes), sizeof header_bytes);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size_bytes()));
  std::vector<uint8_t> rows;
  for (int64_t il = 0; il < kv.n_layer(); ++il)
    for (bool values : {false, true}) {
      rows.resize(static_cast<size_t>(n * kv.row_bytes(values)));
      if (n > 0) kv.read_rows(slot, il, values, 0, n, rows.data());
      out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size()));
    }
  out.close();
  if (!out) throw std::runtime_error(fmt::format("slot file {}: writing failed ({})", path, std::strerror(errno)));
  std::filesystem::rename(part, path);
  return static_cast<uint64_t>(std::filesystem::file_size(path));
}

std::vector<token_id> restore_slot(kv_cache& kv, const std::string& model_identity, int64_t slot, const std::string& path, uint64_t& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw slot_file_missing(fmt::format("slot file {}: cannot be read ({})", path, std::strerror(errno)));
  char head[8];
  uint32_t header_bytes = 0;
  if (!in.read(head, sizeof head) || std::memcmp(head, magic, sizeof magic) != 0 || !in.read(reinterpret_cast<char*>(&header_bytes), sizeof header_bytes) ||
      header_bytes > (1u << 20))
    throw std::runtime_error(fmt::format("slot file {}: not a slot file (hotcold serve --slot-save-path writes them)", path));
  std::string header(header_bytes, '\0');
  if (!in.read(header.data(), header_bytes)) throw std::runtime_error(fmt::format("slot file {}: cut short in its header", path));
  const nlohmann::json h = nlohmann::json::parse(header, nullptr, false);
  if (h.is_discarded() || !h.is_object() || !h.contains("n_tokens") || !h["n_tokens"].is_number_integer())
    throw std::runtime_error(fmt::format("slot file {}: its header is not what a slot file holds", path));
  if (h.value("model", std::string()) != model_identity)
    throw std::runtime_error(fmt::format("slot file {}: made with model {}, this server runs {}", path, h.value("model", std::string("?")), model_identity));
  const std::string kt = h.value("cache_type_k", std::string("?")), vt = h.value("cache_type_v", std::string("?"));
  if (kt != lower_type_name(kv.types().k) || vt != lower_type_name(kv.types().v))
    throw std::runtime_error(fmt::format("slot file {}: its cache holds {} keys and {} values, this server's {} and {} (--cache-type-k, --cache-type-v)",
                                         path, kt, vt, lower_type_name(kv.types().k), lower_type_name(kv.types().v)));
  if (h.value("n_layer", int64_t{-1}) != kv.n_layer() || h.value("k_row_bytes", int64_t{-1}) != kv.row_bytes(false) ||
      h.value("v_row_bytes", int64_t{-1}) != kv.row_bytes(true))
    throw std::runtime_error(fmt::format("slot file {}: its rows are of another shape than this model's", path));
  const int64_t n = h["n_tokens"].get<int64_t>();
  if (n < 0 || n > kv.n_ctx())
    throw std::runtime_error(fmt::format("slot file {}: holds {} positions, more than this server's context of {}", path, n, kv.n_ctx()));
  std::vector<token_id> tokens(static_cast<size_t>(n));
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(n * sizeof(token_id)));
  std::vector<std::vector<uint8_t>> layers;  // read whole before any is written: a short file changes nothing
  for (int64_t k = 0; in && k < 2 * kv.n_layer(); ++k) {
    std::vector<uint8_t> rows(static_cast<size_t>(n * kv.row_bytes(k % 2 != 0)));
    in.read(reinterpret_cast<char*>(rows.data()), static_cast<std::streamsize>(rows.size()));
    layers.push_back(std::move(rows));
  }
  if (!in) throw std::runtime_error(fmt::format("slot file {}: cut short (its header says {} positions)", path, n));
  for (int64_t il = 0; il < kv.n_layer() && n > 0; ++il)
    for (int values = 0; values < 2; ++values) kv.write_rows(slot, il, values != 0, 0, n, layers[static_cast<size_t>(2 * il + values)].data());
  bytes = static_cast<uint64_t>(in.tellg());
  return tokens;
}

}  // namespace hotcold::actors
