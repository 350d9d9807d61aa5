#include "serve/served_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "serve/api_error.h"

namespace halo::serve {

bool ServedModel::answers_to(const std::string& n) const {
  return std::find(names.begin(), names.end(), n) != names.end() || (loras && loras->has(n));
}

std::shared_ptr<const engine::LoraRequest> ServedModel::lora(const std::string& n) const {
  if (!loras || std::find(names.begin(), names.end(), n) != names.end()) return nullptr;
  return loras->find(n);
}

namespace {
void need_loras(const ServedModel& m, const char* field) {
  if (!m.loras)
    throw ApiError(
        400,
        fmt::format("'{}': model '{}' serves no LoRA adapters (start it with --enable-lora)", field,
                    m.name()),
        field);
}
}  // namespace

std::shared_ptr<const engine::LoraRequest> ServedModel::named_lora(const std::string& n,
                                                                   const char* field) const {
  need_loras(*this, field);
  auto r = loras->find(n);
  if (!r)
    throw ApiError(400, fmt::format("'{}': model '{}' has no LoRA adapter '{}'", field, name(), n),
                   field);
  return r;
}

std::shared_ptr<const engine::LoraRequest> ServedModel::lora_by_id(int64_t id,
                                                                   const char* field) const {
  need_loras(*this, field);
  auto r = loras->find_id(id);
  if (!r)
    throw ApiError(
        400,
        fmt::format("'{}': model '{}' has no LoRA adapter with id {} (GET /v1/models lists "
                    "each adapter's lora_int_id)",
                    field, name(), id),
        field);
  return r;
}

std::shared_ptr<ServedModel> ServedModel::make(std::vector<std::string> names, std::string root,
                                               std::shared_ptr<engine::AsyncEngine> eng,
                                               std::optional<text::ChatTemplate> tpl) {
  if (names.empty()) throw Error("a served model needs at least one name");
  auto m = std::make_shared<ServedModel>();
  const auto& e = eng->engine();
  m->names = std::move(names);
  m->root = std::move(root);
  m->max_model_len = e.max_model_len();
  m->vocab_size = e.model().config().spec.vocab_size;
  m->block_size = e.limits().block_size;
  m->num_blocks = e.num_kv_blocks();
  m->max_num_seqs = e.limits().max_num_seqs;
  m->defaults.generation = e.model().config().generation;
  m->defaults.vocab_size = m->vocab_size;
  m->bos = eng->tokenizer().bos_token();
  m->eos = eng->tokenizer().eos_token();
  m->chat_template = std::move(tpl);
  m->loras = e.loras();
  m->engine = std::move(eng);
  return m;
}

}  // namespace halo::serve
