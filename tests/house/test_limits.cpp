// The house's size rules as a test, so the docs cannot drift from the code (docs/architecture.md):
// no source file outside tests/ over 600 lines (launcher/options.cpp, the one file that builds
// CLI11's command table, is the stated exception: CLI11 is header-only and costs each file that
// touches it), and outside kernels/ and tests/ no function over 120 lines or with more than eight
// parameters. Functions are read by Universal Ctags (a test dependency: scripts/install-deps.sh),
// which gives each definition's first and last line and its parameter list.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

constexpr int max_file_lines = 600;
constexpr int max_function_lines = 120;
constexpr int max_parameters = 8;
const std::vector<std::string> rooms = {"actors", "clients", "devices", "engine", "gpu_check", "kernels", "launcher", "loader", "model", "protocol", "server", "tools"};
const std::vector<std::string> source_extensions = {".cpp", ".hpp", ".h", ".cu", ".cuh"};

fs::path source_dir() { return fs::path(HOTCOLD_SOURCE_DIR); }

bool is_source(const fs::path& p) {
  for (const auto& e : source_extensions)
    if (p.extension() == e) return true;
  return false;
}

std::vector<fs::path> sources() {
  std::vector<fs::path> out;
  for (const auto& room : rooms) {
    const fs::path dir = source_dir() / room;
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && is_source(e.path())) out.push_back(fs::relative(e.path(), source_dir()));
  }
  return out;
}

int count_lines(const fs::path& p) {
  std::ifstream in(p);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The parameters of a signature "(a, b<c, d>, e = f(g, h))": commas at the outermost level.
int parameter_count(const std::string& signature) {
  const auto open = signature.find('('), close = signature.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) return 0;
  const std::string inside = signature.substr(open + 1, close - open - 1);
  if (inside.find_first_not_of(" \t") == std::string::npos || inside == "void") return 0;
  int depth = 0, count = 1;
  for (char c : inside) {
    if (c == '(' || c == '<' || c == '[' || c == '{') ++depth;
    else if (c == ')' || c == '>' || c == ']' || c == '}') --depth;
    else if (c == ',' && depth == 0) ++count;
  }
  return count;
}

struct function_tag {
  std::string path, name, signature;
  int line = 0, end = 0;
};

// Every function definition ctags finds in these files (not lambdas: they count in their function).
std::vector<function_tag> functions(const std::vector<fs::path>& files) {
  std::string command = "cd '" + source_dir().string() + "' && ctags --output-format=json --fields=+neS --kinds-C++=f --language-force=C++ -o -";
  for (const auto& f : files) command += " '" + f.string() + "'";
  command += " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::vector<function_tag> out;
  if (!pipe) return out;
  std::string line;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), pipe.get())) {
    line += buf.data();
    if (line.empty() || line.back() != '\n') continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    line.clear();
    if (j.is_discarded() || j.value("_type", "") != "tag" || j.value("kind", "") != "function") continue;
    if (j.value("scopeKind", "") == "function") continue;  // a lambda inside a function
    function_tag t;
    t.path = j.value("path", ""), t.name = j.value("name", ""), t.signature = j.value("signature", "");
    t.line = j.value("line", 0), t.end = j.value("end", t.line);
    out.push_back(t);
  }
  return out;
}

bool under(const std::string& path, const std::string& room) { return path.rfind(room + "/", 0) == 0; }

TEST(House, NoSourceFileOverSixHundredLines) {
  const auto files = sources();
  ASSERT_GT(files.size(), 100u) << "the source tree was not found at " << source_dir();
  for (const auto& f : files) {
    if (f == fs::path("launcher/options.cpp")) continue;
    EXPECT_LE(count_lines(source_dir() / f), max_file_lines) << f.string();
  }
}

TEST(House, NoFunctionOverAHundredAndTwentyLinesOrEightParameters) {
  ASSERT_EQ(std::system("ctags --version > /dev/null 2>&1"), 0) << "Universal Ctags is needed (scripts/install-deps.sh installs it)";
  std::vector<fs::path> files;
  for (const auto& f : sources())
    if (!under(f.string(), "kernels")) files.push_back(f);
  const auto tags = functions(files);
  ASSERT_GT(tags.size(), 500u) << "ctags found too few functions: is it Universal Ctags?";
  for (const auto& t : tags) {
    EXPECT_LE(t.end - t.line + 1, max_function_lines) << t.path << ":" << t.line << " " << t.name << " is " << t.end - t.line + 1 << " lines";
    EXPECT_LE(parameter_count(t.signature), max_parameters) << t.path << ":" << t.line << " " << t.name << t.signature;
  }
}

// The counters themselves, on cases a wrong reading would get wrong.
TEST(House, ParametersAreCountedAtTheOutermostLevel) {
  EXPECT_EQ(parameter_count("()"), 0);
  EXPECT_EQ(parameter_count("(void)"), 0);
  EXPECT_EQ(parameter_count("(int a)"), 1);
  EXPECT_EQ(parameter_count("(std::map<int, int> m, const std::function<void(int, int)>& f, int x = g(1, 2))"), 3);
  EXPECT_EQ(parameter_count("(int a, int b) const"), 2);
}

}  // namespace
