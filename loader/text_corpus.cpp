#include "loader/text_corpus.hpp"

#include <array>
#include <random>
#include <string_view>

namespace hotcold::loader {
namespace {

constexpr std::array<std::string_view, 24> prose = {
    "The cache keeps the hot rows close to the cores that read them.",
    "Most neurons stay silent for any given token, so a predictor can skip them.",
    "She measured the bandwidth twice, once with the other core busy.",
    "It wasn't the kernel's fault; the allocator had fragmented the heap.",
    "Results were averaged over 12 runs (mean 41.7 ms, sd 2.3 ms).",
    "\"Don't block the scheduler,\" he said, \"move the work to a pinned thread.\"",
    "In 2023 the team shipped 3 releases; by 2026 they'd shipped 17.",
    "Weights: 4,096 x 11,008 halves per matrix -- roughly 90 MB each.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "我们在本地运行大型语言模型，热神经元放在显卡上。",
    "東京の天気は晴れ、気温は二十三度です。",
    "한국어 문장도 토크나이저가 처리해야 합니다.",
    "Emoji travel well: 🚀 launch, 🦙 llama, 🔥 hot, ❄️ cold, 👍🏽 fine.",
    "naïve café façade coöperate résumé jalapeño Ångström",
    "URL: https://example.org/path?q=relu&sparse=true#anchor",
    "email: someone@example.com, phone: +1 (555) 010-9999",
    "Tabs\tand\tnewlines\nmix with  double  spaces   and trailing ones   ",
    "UPPERCASE and lowercase And MiXeD CaSe words",
    "Numbers: 0 7 42 365 1024 65535 3.14159 -2.5e-3 1,000,000",
    "Punctuation!? Yes... (really) [maybe] {surely} <tags> & more; done: ok",
    "They're here, we've won, I'd say you'll see it's fine.",
    "हिन्दी में भी कुछ शब्द होने चाहिए।",
    "العربية تكتب من اليمين إلى اليسار.",
};

constexpr std::array<std::string_view, 8> code = {
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
    "def relu(x):\n    return x if x > 0 else 0.0\n",
    "    if (!ptr) return -ENOMEM;\n",
    "fn main() { println!(\"{}\", 1 + 2); }\n",
    "SELECT id, name FROM tokens WHERE score > 0.5 ORDER BY id;\n",
    "x = [i ** 2 for i in range(10) if i % 3 == 0]\n",
    "#include <vector>\nstd::vector<float> v(4096, 0.0f);\n",
    "  \"key\": [1, 2, 3], \"nested\": {\"a\": null}\n",
};

constexpr std::array<std::string_view, 6> separators = {" ", "\n", "\n\n", "  ", "\t", " \n"};

}  // namespace

std::string mixed_text(size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out;
  out.reserve(bytes + 256);
  while (out.size() < bytes) {
    uint64_t r = rng() % 10;
    if (r < 7) out += prose[rng() % prose.size()];
    else out += code[rng() % code.size()];
    out += separators[rng() % separators.size()];
  }
  // Cut at the first character boundary at or after `bytes`.
  size_t cut = bytes;
  while (cut < out.size() && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) ++cut;
  out.resize(cut);
  return out;
}

}  // namespace hotcold::loader
