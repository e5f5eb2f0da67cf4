#include "loader/activation_record.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "loader/profile.hpp"

namespace hotcold::loader {

namespace fs = std::filesystem;

namespace {

activation_record read_profile_record(const std::string& dir) {
  const profile_data d = read_profile(dir);
  activation_record r;
  r.n_layer = d.n_layer, r.n_ff = d.n_ff, r.source = dir, r.from_profile = true;
  const size_t mask = static_cast<size_t>((d.n_ff + 7) / 8), record = d.record_bytes();
  for (int64_t l = 0; l < d.n_layer; ++l) {
    std::ifstream in(d.samples_path(l), std::ios::binary);
    if (!in) throw std::runtime_error(fmt::format("{}: cannot read", d.samples_path(l)));
    std::vector<char> buf(record);
    for (int64_t t = 0; t < d.tokens; ++t) {
      if (!in.read(buf.data(), static_cast<std::streamsize>(record)))
        throw std::runtime_error(fmt::format("{}: {} tokens, expected {}", d.samples_path(l), t, d.tokens));
      const auto* m = reinterpret_cast<const uint8_t*>(buf.data()) + d.n_embd * 4;
      r.entries.push_back({t, l, 1, std::vector<uint8_t>(m, m + mask)});
    }
  }
  return r;
}

uint32_t u32_at(const std::string& b, size_t at) {
  return uint32_t{static_cast<uint8_t>(b[at])} | uint32_t{static_cast<uint8_t>(b[at + 1])} << 8 | uint32_t{static_cast<uint8_t>(b[at + 2])} << 16 |
         uint32_t{static_cast<uint8_t>(b[at + 3])} << 24;
}

}  // namespace

activation_record read_activation_record(const std::string& path_in) {
  if (fs::is_directory(path_in)) return read_profile_record(path_in);
  std::string path = path_in;
  if (!fs::exists(path) || path.ends_with(".json")) {
    if (fs::exists(path_in + ".activations")) path = path_in + ".activations";
    else throw std::runtime_error(fmt::format("{}: no such activation record (nor {}.activations beside it; record one with --trace-out on a sparse model)", path_in, path_in));
  }
  std::ifstream in(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (b.size() < 20 || b.compare(0, 8, "HCACT001") != 0) throw std::runtime_error(fmt::format("{}: not an activation record (no HCACT001 header)", path));
  activation_record r;
  r.source = path;
  r.n_layer = u32_at(b, 8), r.n_ff = u32_at(b, 12);
  const uint32_t hot_layers = u32_at(b, 16);
  if (r.n_layer <= 0 || r.n_ff <= 0 || r.n_layer > 4096 || r.n_ff > (1 << 24) || (hot_layers != 0 && hot_layers != r.n_layer))
    throw std::runtime_error(fmt::format("{}: implausible header ({} layers, {} neurons, {} hot layers)", path, r.n_layer, r.n_ff, hot_layers));
  const size_t row = static_cast<size_t>((r.n_ff + 7) / 8);
  size_t at = 20;
  if (hot_layers) {
    if (b.size() < at + row * hot_layers) throw std::runtime_error(fmt::format("{}: truncated in the hot neurons", path));
    r.hot.resize(hot_layers);
    for (uint32_t l = 0; l < hot_layers; ++l, at += row)
      for (int64_t i = 0; i < r.n_ff; ++i)
        if ((static_cast<uint8_t>(b[at + static_cast<size_t>(i / 8)]) >> (i % 8)) & 1) r.hot[l].push_back(static_cast<int32_t>(i));
  }
  while (at < b.size()) {
    if (at + 16 > b.size()) throw std::runtime_error(fmt::format("{}: truncated record header at byte {}", path, at));
    activation_record::entry e;
    e.step = static_cast<int64_t>(u32_at(b, at) | uint64_t{u32_at(b, at + 4)} << 32);
    e.layer = u32_at(b, at + 8), e.tokens = u32_at(b, at + 12);
    at += 16;
    if (e.layer >= r.n_layer || e.tokens <= 0 || e.tokens > 65536)
      throw std::runtime_error(fmt::format("{}: a record of layer {} with {} tokens (the file has {} layers)", path, e.layer, e.tokens, r.n_layer));
    const size_t bytes = row * static_cast<size_t>(e.tokens);
    if (at + bytes > b.size()) throw std::runtime_error(fmt::format("{}: truncated record at byte {}", path, at));
    e.bits.assign(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + bytes));
    at += bytes;
    r.entries.push_back(std::move(e));
  }
  if (r.entries.empty()) throw std::runtime_error(fmt::format("{}: no steps recorded", path));
  return r;
}

std::vector<std::vector<int32_t>> experts_by_popularity(const activation_record& rec) {
  const int64_t n_layer = rec.n_layer, ne = rec.n_ff, row = (ne + 7) / 8;
  if (rec.entries.empty()) throw std::invalid_argument(fmt::format("{}: no routings recorded", rec.source));
  std::vector<std::vector<int64_t>> count(static_cast<size_t>(n_layer), std::vector<int64_t>(static_cast<size_t>(ne), 0));
  for (const auto& e : rec.entries)
    for (int64_t t = 0; t < e.tokens; ++t)
      for (int64_t x = 0; x < ne; ++x) count[static_cast<size_t>(e.layer)][static_cast<size_t>(x)] += (e.bits[static_cast<size_t>(t * row + x / 8)] >> (x % 8)) & 1;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n_layer));
  for (int64_t l = 0; l < n_layer; ++l) {
    auto& order = out[static_cast<size_t>(l)];
    order.resize(static_cast<size_t>(ne));
    std::iota(order.begin(), order.end(), 0);
    const auto& c = count[static_cast<size_t>(l)];
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return c[static_cast<size_t>(a)] > c[static_cast<size_t>(b)]; });
  }
  return out;
}

}  // namespace hotcold::loader
