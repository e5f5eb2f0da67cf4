// hotcold chat: a conversation typed line by line, written with the model's chat template, answered on
// the forward pass called directly; llama-cli's commands (/help, /clear, /save, /load, /exit) and its
// Ctrl-C, which stops the reply and keeps the conversation.
#include <editline/readline.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iterator>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/cmd_generate.hpp"
#include "launcher/commands.hpp"
#include "launcher/direct_generation.hpp"
#include "model/chat_template.hpp"
#include "model/grammar.hpp"

namespace hotcold::launcher {
namespace {

// What a chat holds: the conversation, its tokens as the template wrote them (`written`: each turn the
// whole conversation is written again and only what differs from them is computed — the new user
// turn, and whatever the template writes around the last reply), and with --context-shift the written
// tokens the shifts dropped (shift_rule): a turn computes from where it differs, that many positions
// lower in the cache.
struct chat_state {
  std::vector<chat_message> conversation;
  std::vector<token_id> written;
  shift_rule shift;
};

// Ctrl-C during a reply: the reply ends where it is (set by the handler, read by generate).
std::atomic<bool> stop_reply{false};
extern "C" void on_interrupt(int) { stop_reply.store(true); }

// While a reply is generated, SIGINT stops it instead of the process; at the prompt it ends the chat
// as it always did.
struct interrupt_stops_reply {
  struct sigaction old {};
  interrupt_stops_reply() {
    stop_reply.store(false);
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
  }
  ~interrupt_stops_reply() { sigaction(SIGINT, &old, nullptr); }
};

// A chat turn's computation: its new tokens from pos, the reply (shifting as generate needs), the
// conversation and what was written brought up to date; its timings on stderr.
void reply_to(loaded& l, const chat_args& a, sampler& smp, const std::vector<token_id>& fresh, int64_t pos, const std::vector<token_id>& tokens,
              chat_state& c) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<token_id> reply;
  {
    interrupt_stops_reply guard;
    auto logits = feed(*l.ctx, fresh, pos);
    const double prompt_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto t1 = std::chrono::steady_clock::now();
    generate(*l.ctx, smp, logits, pos, static_cast<int>(tokens_to_generate(a.s.n_predict, l.ctx->n_ctx(), pos, c.shift.on)), c.shift, &reply, &stop_reply);
    const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    fmt::print("\n");
    std::fflush(stdout);
    fmt::print(stderr, "hotcold chat: {}{} new prompt tokens in {:.0f} ms; {} tokens in {:.2f} s ({:.1f} tok/s)\n", stop_reply.load() ? "(stopped) " : "",
               fresh.size(), 1000 * prompt_s, reply.size(), gen_s, reply.empty() ? 0.0 : static_cast<double>(reply.size()) / std::max(gen_s, 1e-9));
  }
  c.written = tokens;
  c.written.insert(c.written.end(), reply.begin(), reply.end());
  c.conversation.push_back({"assistant", l.m->vocabulary().detokenize(reply)});
}

constexpr const char* help_text =
    "hotcold chat: /help this list; /clear forget the conversation (its system message stays); /save FILE the conversation as JSON "
    "(the API's messages); /load FILE one saved so; /exit end (as Ctrl-D). Ctrl-C during a reply stops it and keeps what it said. "
    "A line beginning with // is sent as text beginning with /.";

// The conversation as the API's messages: [{"role", "content"}, ...].
void save_conversation(const std::vector<chat_message>& conversation, const std::string& path) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& m : conversation) j.push_back({{"role", m.role}, {"content", m.content}});
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!(out << j.dump(2) << "\n")) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
}

std::vector<chat_message> load_conversation(const std::string& path) {
  const auto j = nlohmann::json::parse(read_text_file(path), nullptr, false);
  if (!j.is_array()) throw std::invalid_argument(fmt::format("{}: not a conversation (a JSON list of {{\"role\", \"content\"}})", path));
  std::vector<chat_message> out;
  for (const auto& m : j) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") || !m["content"].is_string())
      throw std::invalid_argument(fmt::format("{}: each message is {{\"role\": ..., \"content\": \"...\"}}", path));
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

// A line that is a command (/help, ...): done (true), with `end` set for /exit; false for text.
bool chat_command(const std::string& line, chat_state& c, const chat_args& a, bool& end) {
  if (line.empty() || line[0] != '/' || line.rfind("//", 0) == 0) return false;
  const auto space = line.find(' ');
  const std::string word = line.substr(0, space), arg = space == std::string::npos ? "" : line.substr(line.find_first_not_of(' ', space));
  try {
    if (word == "/exit" || word == "/quit") {
      end = true;
    } else if (word == "/help") {
      fmt::print(stderr, "{}\n", help_text);
    } else if (word == "/clear") {
      c.conversation.clear();
      if (!a.system.empty()) c.conversation.push_back({"system", a.system});
      fmt::print(stderr, "hotcold chat: the conversation is cleared\n");
    } else if (word == "/save" && !arg.empty()) {
      save_conversation(c.conversation, arg);
      fmt::print(stderr, "hotcold chat: {} messages saved to {}\n", c.conversation.size(), arg);
    } else if (word == "/load" && !arg.empty()) {
      c.conversation = load_conversation(arg);
      fmt::print(stderr, "hotcold chat: {} messages loaded from {}\n", c.conversation.size(), arg);
    } else {
      fmt::print(stderr, "hotcold chat: {}: {}\n", word, word == "/save" || word == "/load" ? "give a FILE" : "not a command (/help lists them)");
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "hotcold chat: {}: {}\n", word, e.what());
  }
  return true;
}

}  // namespace

void run_chat(chat_args a) {
  finalize_sampling(a.s);
  auto l = load(a.m);
  const vocab& v = l.m->vocabulary();
  std::string note;
  const chat_template tmpl = chat_template::choose(l.m->chat_template_text(), a.chat_template, &note);
  if (!note.empty()) fmt::print(stderr, "hotcold chat: {}\n", note);
  sampler smp(a.s.p);
  // With a grammar, each reply follows it from its start.
  const auto rules = a.s.p.grammar.empty() ? nullptr : std::make_shared<const grammar>(grammar::parse(a.s.p.grammar));
  chat_state c;
  if (!a.system.empty()) c.conversation.push_back({"system", a.system});
  const token_id bos = v.bos();
  c.shift = shift_rule{l.context_shift, l.keep, 0, false};
  fmt::print(stderr, "hotcold chat: {} template; type a line and press Enter; /help lists the commands; Ctrl-D ends.\n", tmpl.name());
  for (bool end = false; !end;) {
    char* line = readline("> ");
    if (!line) break;
    std::string text = line;
    std::free(line);
    if (!text.empty()) add_history(text.c_str());
    if (chat_command(text, c, a, end)) continue;
    if (text.rfind("//", 0) == 0) text.erase(0, 1);
    c.conversation.push_back({"user", text});
    std::vector<token_id> tokens;
    try {
      tokens = tmpl.tokenize(v, c.conversation, true);
    } catch (const chat_template_error& e) {  // (a loaded conversation the template cannot write: said, and not kept)
      fmt::print(stderr, "hotcold chat: {}\n", e.what());
      c.conversation.pop_back();
      continue;
    }
    if (c.written.empty()) c.shift.prompt_tokens = static_cast<int64_t>(tokens.size()), c.shift.bos_first = bos >= 0 && tokens.front() == bos;
    // (At least the last token is computed again: its logits start the reply.)
    size_t same = std::min<size_t>(std::mismatch(c.written.begin(), c.written.end(), tokens.begin(), tokens.end()).first - c.written.begin(), tokens.size() - 1);
    if (c.shift.dropped > 0 && static_cast<int64_t>(same) < c.shift.kept + c.shift.dropped) same = 0, c.shift.dropped = 0;  // (it differs where the cache dropped it: all again)
    int64_t pos = static_cast<int64_t>(same) - c.shift.dropped;
    const std::vector<token_id> fresh(tokens.begin() + static_cast<std::ptrdiff_t>(same), tokens.end());
    while (c.shift.on && pos + static_cast<int64_t>(fresh.size()) >= l.ctx->n_ctx())  // room for the turn first
      if (!c.shift.make(*l.ctx, pos)) break;
    if (pos + static_cast<int64_t>(fresh.size()) >= l.ctx->n_ctx()) {
      fmt::print(stderr, "hotcold chat: the context is full ({} tokens){}\n", l.ctx->n_ctx(), c.shift.on ? "" : "; /clear starts again, or --context-shift");
      c.conversation.pop_back();
      continue;
    }
    for (token_id t : fresh) smp.accept(t);
    if (rules) smp.constrain(std::make_shared<token_grammar>(rules, l.m->grammar_tokens()));
    reply_to(l, a, smp, fresh, pos, tokens, c);
  }
  l.finish();
}

}  // namespace hotcold::launcher
