#include "serve/served_model.h"

#include <algorithm>

#include "common/error.h"

namespace halo::serve {

bool ServedModel::answers_to(const std::string& n) const {
  return std::find(names.begin(), names.end(), n) != names.end();
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
  m->engine = std::move(eng);
  return m;
}

}  // namespace halo::serve
