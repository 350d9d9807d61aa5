#include "serve/embeddings_api.h"

#include <fmt/format.h>

#include <bit>
#include <optional>
#include <cstring>

#include "serve/api_error.h"
#include "serve/prompt_input.h"

namespace halo::serve {

namespace {

// RFC 4648 base64 of the values as little-endian float32, as OpenAI's
// `encoding_format: "base64"` (the SDKs decode it into a Float32Array).
std::string base64_floats(const std::vector<float>& v) {
  static_assert(std::endian::native == std::endian::little,
                "base64 embeddings are little-endian float32");
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  const size_t n = v.size() * sizeof(float);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t(p[i]) << 16) | (i + 1 < n ? uint32_t(p[i + 1]) << 8 : 0u) |
                       (i + 2 < n ? uint32_t(p[i + 2]) : 0u);
    out += kAlphabet[(b >> 18) & 63];
    out += kAlphabet[(b >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(b >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[b & 63] : '=';
  }
  return out;
}

class EmbeddingsJob : public HttpSink {
 public:
  EmbeddingsJob(std::string model_name, bool base64)
      : model_(std::move(model_name)), base64_(base64) {}

  void on_output(Generation&, size_t, const engine::StreamEvent&, size_t) override {}
  void on_error(Generation&) override {}

 protected:
  HttpResponse error_response(int status, const std::string& message) override {
    HttpResponse r;
    r.status = status;
    r.body = dump(error_object(status, message));
    return r;
  }

  void finish(Generation& g) override {
    if (g.failed()) return res->send(error_response(g.error_status(), g.error()));
    ojson data = ojson::array();
    for (size_t i = 0; i < g.choices().size(); ++i) {
      const auto& e = g.choices()[i].embedding;
      if (e.empty())
        return res->send(error_response(500, fmt::format("input {} produced no embedding", i)));
      ojson item{{"object", "embedding"}, {"index", i}};
      if (base64_) {
        item["embedding"] = base64_floats(e);
      } else {
        ojson values = ojson::array();
        for (float x : e) values.push_back(static_cast<double>(x));
        item["embedding"] = std::move(values);
      }
      data.push_back(std::move(item));
    }
    const int64_t prompt_tokens = g.prompt_tokens();
    HttpResponse r;
    r.body =
        dump(ojson{{"id", g.id()},
                   {"object", "list"},
                   {"created", unix_now()},
                   {"model", model_},
                   {"data", std::move(data)},
                   {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
    res->send(std::move(r));
  }

 private:
  std::string model_;
  bool base64_;
};

}  // namespace

EmbeddingsRequest parse_embeddings(Fields& f, const ServedModel& m, const ServingCore& core) {
  if (!m.pooling)
    throw ApiError(
        400,
        fmt::format("model '{}' is not served for embeddings: start it with --task embed",
                    m.name()),
        "model", error_code::kInvalidValue);
  EmbeddingsRequest r;
  r.pooling = *m.pooling;
  const json* input = f.get("input");
  if (!input) throw ApiError(400, "'input' is required", "input", error_code::kMissingParameter);
  r.prompts = parse_prompts(*input, "input", m.vocab_size);
  if (auto fmt_name = f.string("encoding_format")) {
    if (*fmt_name != "float" && *fmt_name != "base64")
      throw ApiError(400,
                     fmt::format("'encoding_format' must be float or base64, got '{}'", *fmt_name),
                     "encoding_format", error_code::kInvalidValue);
    r.base64 = *fmt_name == "base64";
  }
  if (auto d = f.integer("dimensions", 1, 1 << 20)) r.pooling.dimensions = static_cast<int>(*d);
  if (auto n = f.boolean("normalize")) r.pooling.normalize = *n;
  f.touch("user");
  f.touch("encoding_format");
  const bool add_special = f.boolean("add_special_tokens").value_or(true);
  std::optional<int> truncate;
  if (auto k = f.integer("truncate_prompt_tokens", -1, m.max_model_len)) truncate = static_cast<int>(*k);
  for (const auto& p : r.prompts)
    core.check_prompt_bytes(m, p.text.size(), "input");  // before tokenizing
  for (auto& p : r.prompts) {
    if (p.from_text) p.ids = m.tokenizer().encode(p.text, add_special);
    if (p.ids.empty()) throw ApiError(400, "an input is empty", "input", error_code::kInvalidValue);
    truncate_prompt(p.ids, truncate, m.max_model_len);
    if (static_cast<int>(p.ids.size()) > m.max_model_len)
      throw ApiError(
          400,
          fmt::format("an input has {} tokens, more than the model's maximum context length ({})",
                      p.ids.size(), m.max_model_len),
          "input", error_code::kInvalidValue);
  }
  return r;
}

std::shared_ptr<HttpSink> make_embeddings_sink(std::string model_name, bool base64) {
  return std::make_shared<EmbeddingsJob>(std::move(model_name), base64);
}

}  // namespace halo::serve
