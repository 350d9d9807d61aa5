#include "text/tokenizer/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "common/error.h"

namespace halo::text::detail {

uint32_t Vocab::hash_of(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return static_cast<uint32_t>(h ^ (h >> 32));
}

void Vocab::reserve(std::size_t n) {
  entries_.reserve(n);
  std::size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap > slots_.size()) {
    slots_.assign(cap, 0);
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      std::size_t p = entries_[i].hash & (cap - 1);
      while (slots_[p] != 0) p = (p + 1) & (cap - 1);
      slots_[p] = static_cast<uint32_t>(i + 1);
    }
  }
}

void Vocab::grow() { reserve(std::max<std::size_t>(16, entries_.size() * 2)); }

void Vocab::insert(std::string_view token, int32_t id) {
  if ((entries_.size() + 1) * 2 > slots_.size()) grow();
  const uint32_t h = hash_of(token);
  const std::size_t mask = slots_.size() - 1;
  std::size_t p = h & mask;
  for (; slots_[p] != 0; p = (p + 1) & mask) {
    Entry& e = entries_[slots_[p] - 1];
    if (e.hash == h && std::string_view(arena_).substr(e.offset, e.length) == token) {
      e.id = id;
      return;
    }
  }
  entries_.push_back(Entry{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token.size()), id, h});
  arena_.append(token);
  slots_[p] = static_cast<uint32_t>(entries_.size());
}

std::optional<int32_t> Vocab::find(std::string_view token) const {
  if (slots_.empty()) return std::nullopt;
  const uint32_t h = hash_of(token);
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t p = h & mask; slots_[p] != 0; p = (p + 1) & mask) {
    const Entry& e = entries_[slots_[p] - 1];
    if (e.hash == h && e.length == token.size() && std::string_view(arena_).substr(e.offset, e.length) == token) {
      return e.id;
    }
  }
  return std::nullopt;
}

void MergeTable::reserve(std::size_t n) {
  std::size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  count_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) insert_or_assign(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.merge);
  }
}

void MergeTable::insert_or_assign(int32_t a, int32_t b, Merge m) {
  if ((count_ + 1) * 2 > slots_.size()) reserve(std::max<std::size_t>(16, count_ * 2 + 2));
  const uint64_t k = key(a, b);
  std::size_t i = mix(k) & mask_;
  for (; slots_[i].key != kEmpty; i = (i + 1) & mask_) {
    if (slots_[i].key == k) {
      slots_[i].merge = m;
      return;
    }
  }
  slots_[i].key = k;
  slots_[i].merge = m;
  ++count_;
}

Bpe::Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options options,
         const std::string& what)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  if (options_.unk_token) {
    unk_id_ = vocab_.find(*options_.unk_token);
    if (!unk_id_) {
      throw Error(fmt::format("{}: model.unk_token '{}' is not in the vocabulary", what, *options_.unk_token));
    }
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
  merges_.reserve(merges.size());
  std::string joined;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = vocab_.find(a);
    const auto ib = vocab_.find(b);
    if (!ia || !ib) {
      throw Error(fmt::format("{}: merge {} '{} {}' uses a token that is not in the vocabulary", what, rank, a, b));
    }
    joined.assign(a).append(b);
    const auto in = vocab_.find(joined);
    if (!in) {
      throw Error(fmt::format("{}: merge {} '{} {}' produces '{}', which is not in the vocabulary", what, rank, a,
                              b, joined));
    }
    merges_.insert_or_assign(*ia, *ib, MergeTable::Merge{static_cast<int32_t>(rank), *in});
  }
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{id, n - 1, n + 1, true});
  };
  bool pending_unk = false;
  for (std::size_t i = 0; i < word.size();) {
    const auto b0 = static_cast<unsigned char>(word[i]);
    std::size_t n = b0 < 0x80 ? 1 : b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
    if (i + n > word.size()) n = word.size() - i;
    const std::string_view ch = word.substr(i, n);
    i += n;
    if (const auto id = vocab_.find(ch)) {
      if (pending_unk) add(*unk_id_), pending_unk = false;
      add(*id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        if (pending_unk) add(*unk_id_), pending_unk = false;
        for (char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !options_.fuse_unk) add(*unk_id_);
      pending_unk = true;
    }
    // Without an unk token the character is dropped, as Hugging Face does.
  }
  if (pending_unk) add(*unk_id_);
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Item {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Item& o) const {  // min-heap on (rank, pos)
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Item> heap_storage;
  heap_storage.reserve(syms.size());
  std::priority_queue<Item> queue(std::less<Item>{}, std::move(heap_storage));
  for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
    if (const auto* m = merges_.find(syms[i].id, syms[i + 1].id)) queue.push(Item{m->rank, static_cast<int32_t>(i), m->new_id});
  }
  while (!queue.empty()) {
    const Item top = queue.top();
    queue.pop();
    Symbol& left = syms[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[static_cast<std::size_t>(left.next)];
    const auto* m = merges_.find(left.id, right.id);
    if (!m || m->new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) syms[static_cast<std::size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) {
      if (const auto* pm = merges_.find(syms[static_cast<std::size_t>(left.prev)].id, left.id))
        queue.push(Item{pm->rank, left.prev, pm->new_id});
    }
    if (left.next >= 0) {
      if (const auto* nm = merges_.find(left.id, syms[static_cast<std::size_t>(left.next)].id))
        queue.push(Item{nm->rank, top.pos, nm->new_id});
    }
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next) out.push_back(syms[static_cast<std::size_t>(i)].id);
}

}  // namespace halo::text::detail
