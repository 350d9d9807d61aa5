#pragma once
// The BPE model of tokenizer.json (internal).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace halo::text::detail {

// String -> id table with open addressing over a contiguous arena: one probe
// sequence of 32-bit hashes, then a single string compare (hundreds of
// thousands of lookups at load time stay cache friendly).
class Vocab {
 public:
  // Adds or replaces `token`.
  void insert(std::string_view token, int32_t id);
  std::optional<int32_t> find(std::string_view token) const;
  std::size_t size() const { return entries_.size(); }
  void reserve(std::size_t n);
  template <typename F>
  void for_each(F&& f) const {  // f(std::string_view token, int32_t id)
    for (const auto& e : entries_) f(std::string_view(arena_).substr(e.offset, e.length), e.id);
  }

 private:
  struct Entry {
    uint32_t offset, length;
    int32_t id;
    uint32_t hash;
  };
  static uint32_t hash_of(std::string_view s);
  void grow();
  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> slots_;  // entry index + 1, 0 = empty; size is a power of two
};

// (left id, right id) -> (rank, merged id), open addressing.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  void reserve(std::size_t n);
  void insert_or_assign(int32_t a, int32_t b, Merge m);
  const Merge* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    for (std::size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == kEmpty) return nullptr;
      if (s.key == k) return &s.merge;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static std::size_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, count_ = 0;
};

class Bpe {
 public:
  struct Options {
    std::optional<std::string> unk_token;
    bool fuse_unk = false;
    bool byte_fallback = false;
    bool ignore_merges = false;
  };
  // merges: pairs of token strings, in rank order. `what` names the file for errors.
  Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options options,
      const std::string& what);

  // Appends the ids of one pre-token.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const Vocab& vocab() const { return vocab_; }
  bool byte_fallback() const { return options_.byte_fallback; }

 private:
  Vocab vocab_;
  MergeTable merges_;
  Options options_;
  std::optional<int32_t> unk_id_;
  int32_t byte_ids_[256];  // id of <0xNN>, -1 when missing
};

}  // namespace halo::text::detail
