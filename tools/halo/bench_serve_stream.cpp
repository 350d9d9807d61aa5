#include "bench_serve_stream.h"

#include <nlohmann/json.hpp>

namespace halo::tools {
namespace {

// {"message": "..."} or "..." or anything else, as text.
std::string message_of(const nlohmann::json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (auto m = e.is_object() ? e.find("message") : e.end(); m != e.end() && m->is_string())
    return m->get<std::string>();
  return e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string error_body_message(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object())
    if (auto e = j.find("error"); e != j.end()) return message_of(*e);
  return std::string(body.substr(0, 300));
}

void StreamReader::feed(std::string_view bytes, BenchClock::time_point now, StreamResult& r) {
  pending_.append(bytes);
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(pending_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.starts_with("data:")) continue;  // event:, id:, comments, blank lines
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    on_event(line, now, r);
  }
  pending_.erase(0, start);
}

// One `data:` payload: a completion or chat completion chunk, the usage
// chunk, an error, or [DONE].
void StreamReader::on_event(std::string_view data, BenchClock::time_point now, StreamResult& r) {
  if (data == "[DONE]") return;
  auto j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  if (auto e = j.find("error"); e != j.end()) {
    r.error = message_of(*e);
    return;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    auto count = [&](const char* key) {
      auto it = u->find(key);
      return it != u->end() && it->is_number_integer() ? it->get<long long>() : -1LL;
    };
    r.usage_prompt_tokens = count("prompt_tokens");
    r.usage_completion_tokens = count("completion_tokens");
  }
  auto c = j.find("choices");
  if (c == j.end() || !c->is_array() || c->empty() || !(*c)[0].is_object()) return;
  const auto& choice = (*c)[0];
  std::string piece;
  auto add = [&](const nlohmann::json& obj, const char* key) {
    if (auto t = obj.find(key); t != obj.end() && t->is_string())
      piece += t->get_ref<const std::string&>();
  };
  add(choice, "text");  // /v1/completions
  if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
    add(*d, "reasoning_content");  // /v1/chat/completions
    add(*d, "content");
  }
  // An answer that ends at once (end of sequence first) has no text: its
  // finish is when its first token came.
  auto f = choice.find("finish_reason");
  const bool finished_empty = r.chunks.empty() && f != choice.end() && f->is_string();
  if (piece.empty() && !finished_empty) return;
  r.chunks.push_back(now);
  r.text += piece;
}

}  // namespace halo::tools
