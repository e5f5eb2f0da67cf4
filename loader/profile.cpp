#include "loader/profile.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/fp16.hpp"
#include "engine/forward.hpp"
#include "model/sampler.hpp"
#include "loader/text_corpus.hpp"

namespace hotcold::loader {

namespace fs = std::filesystem;

std::string profile_data::samples_path(int64_t layer) const { return (fs::path(dir) / fmt::format("layer-{:03}.samples", layer)).string(); }

namespace {

sampling_params self_text_sampling() {
  sampling_params sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 2024;
  return sp;
}

}  // namespace

calibration_tokens::calibration_tokens(const model& m, const std::string& text_path, int64_t chunk)
    : v_(m.vocabulary()), self_text_(self_text_sampling()), chunk_(std::max<int64_t>(1, std::min(chunk, m.hp().n_ctx_train))) {
  // The given text, or (default) text the model samples itself at temperature 1, which covers the
  // vocabulary far more evenly than any small built-in corpus.
  if (!text_path.empty()) {
    std::ifstream in(text_path, std::ios::binary);
    if (!in) throw std::system_error(errno, std::generic_category(), text_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text_ = v_.tokenize(text, false, false);
    if (text_.empty()) throw std::invalid_argument("the calibration text has no tokens");
  }
  seed_prompt_ = v_.tokenize(mixed_text(64, 2024), false, false);
  bos_ = v_.add_bos() && v_.bos() != no_token;
}

token_id calibration_tokens::at(int64_t t, std::span<const float> logits) {
  // (The text repeats if it is shorter than asked; each chunk restarts positions.)
  const int64_t pos = t % chunk_;
  if (pos == 0 && bos_) return v_.bos();
  if (!text_.empty()) return text_[static_cast<size_t>(t) % text_.size()];
  if (pos < 8 || logits.empty()) return seed_prompt_[static_cast<size_t>(t) % seed_prompt_.size()];  // a few real tokens to start each chunk
  return self_text_.sample(logits);
}

profile_result run_profile(const profile_options& o, const std::function<void(int64_t, int64_t)>& progress) {
  if (o.tokens < 1) throw std::invalid_argument("--tokens must be at least 1");
  auto m = model::load(o.model_path, {}, o.act_thresholds);
  const auto& hp = m->hp();
  if (!hp.sparse_activation())
    throw std::invalid_argument(fmt::format("{}: the FFN activation is {}, which fires every neuron; profile needs a ReLU-family model (relu, drelu) "
                                            "or thresholds (prepare --sparsity)",
                                            o.model_path, activation_name(hp.act)));
  calibration_tokens feed(*m, o.calibration_path, o.chunk);
  const int64_t n = o.tokens;
  fs::create_directories(o.out_dir);

  // A thresholded model's samples hold pre-activations: its predictors estimate them (predictor_train).
  const bool preactivations = !hp.act_threshold.empty();
  profile_data meta;
  meta.dir = o.out_dir;
  meta.n_layer = hp.n_layer, meta.n_embd = hp.n_embd, meta.n_ff = hp.n_ff;
  std::vector<std::ofstream> samples;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    samples.emplace_back(meta.samples_path(l), std::ios::binary | std::ios::trunc);
    if (!samples.back()) throw std::system_error(errno, std::generic_category(), "cannot write " + meta.samples_path(l));
  }
  std::vector<uint64_t> counts(static_cast<size_t>(hp.n_layer * hp.n_ff), 0);
  std::vector<float> pred_in(static_cast<size_t>(hp.n_embd));
  std::vector<uint8_t> mask(static_cast<size_t>((hp.n_ff + 7) / 8));
  std::vector<uint16_t> margin(static_cast<size_t>(hp.n_ff));
  std::vector<int64_t> active(static_cast<size_t>(hp.n_layer), 0);

  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t chunk = feed.chunk();
  inference_context ctx(m, chunk, threads);
  ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> x) {
    if (name == observed::ffn_pred_in) {
      std::copy(x.begin(), x.end(), pred_in.begin());
      return;
    }
    if (name == (preactivations ? observed::ffn_preact : observed::ffn_margin)) {
      kernels::fp32_to_fp16_row(x.data(), margin.data(), x.size());
      return;
    }
    if (name != observed::ffn_act) return;
    std::fill(mask.begin(), mask.end(), 0);
    uint64_t* c = counts.data() + layer * hp.n_ff;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != 0.0f) {
        mask[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
        ++c[i];
        ++active[static_cast<size_t>(layer)];
      }
    auto& out = samples[static_cast<size_t>(layer)];
    out.write(reinterpret_cast<const char*>(pred_in.data()), static_cast<std::streamsize>(pred_in.size() * 4));
    out.write(reinterpret_cast<const char*>(mask.data()), static_cast<std::streamsize>(mask.size()));
    out.write(reinterpret_cast<const char*>(margin.data()), static_cast<std::streamsize>(margin.size() * 2));
  });
  std::span<const float> logits;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = t % chunk;
    const token_id tok = feed.at(t, logits);
    logits = ctx.forward(tok, pos);
    if (progress && (t % 16 == 15 || t + 1 == n)) progress(t + 1, n);
  }
  for (auto& s : samples) {
    s.flush();
    if (!s) throw std::runtime_error("writing profile samples failed");
  }
  {
    std::ofstream c((fs::path(o.out_dir) / "firing_counts.u64").string(), std::ios::binary | std::ios::trunc);
    c.write(reinterpret_cast<const char*>(counts.data()), static_cast<std::streamsize>(counts.size() * 8));
    if (!c) throw std::runtime_error("writing firing counts failed");
  }
  profile_result r;
  r.tokens = n;
  r.n_layer = hp.n_layer, r.n_embd = hp.n_embd, r.n_ff = hp.n_ff;
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    double frac = static_cast<double>(active[static_cast<size_t>(l)]) / static_cast<double>(n * hp.n_ff);
    r.active_fraction.push_back(frac);
    layers.push_back({{"layer", l}, {"samples", meta.samples_path(l)}, {"active_fraction", frac}});
  }
  nlohmann::json j{{"model", fs::absolute(o.model_path).string()}, {"n_layer", hp.n_layer}, {"n_embd", hp.n_embd}, {"n_ff", hp.n_ff},
                   {"format", profile_format}, {"tokens", n}, {"calibration", o.calibration_path.empty() ? "sampled from the model (temperature 1, seed 2024)" : o.calibration_path},
                   {"firing_counts", "firing_counts.u64"}, {"values", preactivations ? "preactivations" : "margins"}, {"layers", layers}};
  if (preactivations) j["activation"] = std::string(activation_name(hp.act));
  for (const auto& l : m->weights().layers)
    if (l.ffn_order) j["file_order"] = true;
  std::ofstream((fs::path(o.out_dir) / "profile.json").string()) << j.dump(2) << "\n";
  return r;
}

profile_data read_profile(const std::string& dir) {
  std::ifstream in((fs::path(dir) / "profile.json").string());
  if (!in) throw std::runtime_error(fmt::format("{}: no profile.json (run `hotcold profile` first)", dir));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("{}/profile.json: {}", dir, e.what()));
  }
  if (j.value("format", 1) != profile_format)
    throw std::runtime_error(fmt::format("{}: profile format {} was written by another hotcold (this one reads {}); profile again",
                                         dir, j.value("format", 1), profile_format));
  profile_data d;
  d.dir = dir;
  d.model_path = j.value("model", "");
  d.n_layer = j.at("n_layer").get<int64_t>();
  d.n_embd = j.at("n_embd").get<int64_t>();
  d.n_ff = j.at("n_ff").get<int64_t>();
  d.tokens = j.at("tokens").get<int64_t>();
  const std::string values = j.value("values", "margins");
  if (values == "preactivations") {
    auto a = activation_from_name(j.value("activation", ""));
    if (!a) throw std::runtime_error(fmt::format("{}/profile.json: pre-activation samples without a known \"activation\"", dir));
    d.preactivations = true, d.act = *a;
  } else if (values != "margins") {
    throw std::runtime_error(fmt::format("{}/profile.json: \"values\" is '{}', not margins or preactivations", dir, values));
  }
  d.file_order = j.value("file_order", false);
  d.firing_counts.resize(static_cast<size_t>(d.n_layer * d.n_ff));
  std::ifstream c((fs::path(dir) / "firing_counts.u64").string(), std::ios::binary);
  c.read(reinterpret_cast<char*>(d.firing_counts.data()), static_cast<std::streamsize>(d.firing_counts.size() * 8));
  if (!c) throw std::runtime_error(fmt::format("{}/firing_counts.u64 is missing or short", dir));
  for (int64_t l = 0; l < d.n_layer; ++l) {
    auto size = fs::file_size(d.samples_path(l));
    if (size != d.record_bytes() * static_cast<uint64_t>(d.tokens))
      throw std::runtime_error(fmt::format("{}: {} bytes, expected {} records of {}", d.samples_path(l), size, d.tokens, d.record_bytes()));
  }
  return d;
}

placement_plan plan_from_profile(const std::string& model_path, const std::string& stats_dir, double budget_gib, int64_t ctx, kv_types kv) {
  auto m = model::load(model_path, {true});
  const auto& hp = m->hp();
  auto data = read_profile(stats_dir);
  if (data.n_layer != hp.n_layer || data.n_ff != hp.n_ff)
    throw std::invalid_argument(fmt::format("{}: the profile is of a model with {} layers x {} neurons, this one has {} x {}", stats_dir,
                                            data.n_layer, data.n_ff, hp.n_layer, hp.n_ff));
  return loader::plan_placement(*m, counts_in_order_of(data, *m), budget_gib, ctx, kv);
}

std::vector<uint64_t> counts_in_order_of(const profile_data& d, const model& m) {
  const auto& hp = m.hp();
  if (d.n_layer != hp.n_layer || d.n_ff != hp.n_ff)
    throw std::invalid_argument(fmt::format("{}: the profile is of a model with {} layers x {} neurons, {} has {} x {}", d.dir, d.n_layer, d.n_ff,
                                            m.path(), hp.n_layer, hp.n_ff));
  std::vector<uint64_t> out = d.firing_counts;
  if (d.file_order) return out;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const tensor_view& o = m.weights().layers[static_cast<size_t>(l)].ffn_order;
    if (!o) continue;
    const auto* from = reinterpret_cast<const int32_t*>(o.data);
    for (int64_t i = 0; i < hp.n_ff; ++i) out[static_cast<size_t>(l * hp.n_ff + i)] = d.firing_counts[static_cast<size_t>(l * hp.n_ff + from[i])];
  }
  return out;
}

std::vector<uint64_t> firing_counts_for(const std::string& model_path, const model& m, const short_profile_options& o) {
  const auto& hp = m.hp();
  const std::string beside = model_path + ".work";
  if (fs::exists(fs::path(beside) / "firing_counts.u64")) {
    try {
      auto d = read_profile(beside);
      if (d.n_layer == hp.n_layer && d.n_ff == hp.n_ff) return counts_in_order_of(d, m);
    } catch (const std::exception&) {
      // unreadable: profile afresh
    }
  }
  profile_options po;
  po.model_path = model_path;
  po.tokens = o.tokens;
  po.chunk = std::min<int64_t>(256, hp.n_ctx_train);
  po.threads = o.threads;
  po.out_dir = (fs::path(o.cache_dir) / "profiles" / fs::path(model_path).filename()).string();
  fs::create_directories(po.out_dir);
  run_profile(po, o.progress);
  return read_profile(po.out_dir).firing_counts;
}

}  // namespace hotcold::loader
