// tokenize_dump TOKENIZER_DIR INPUT.jsonl [OUTPUT.jsonl]
// tokenize_dump --gguf-metadata METADATA.json INPUT.jsonl [OUTPUT.jsonl]
//   (the tokenizer built from GGUF metadata as JSON, e.g. written by
//   tools/make_gguf.py --metadata-json)
// For each input line ({"text": ...} or a JSON string) writes one JSON line:
//   {"ids": encode(text, true), "ids_plain": encode(text, false),
//    "decoded": decode(ids, true), "decoded_raw": decode(ids, false),
//    "decoded_plain": decode(ids_plain, true)}
// and prints the total encode time to stderr.
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "text/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  const bool gguf = argc > 1 && std::string(argv[1]) == "--gguf-metadata";
  if (gguf) {
    ++argv;
    --argc;
  }
  if (argc < 3) {
    std::cerr << "usage: tokenize_dump [--gguf-metadata METADATA.json | TOKENIZER_DIR] INPUT.jsonl "
                 "[OUTPUT.jsonl]\n";
    return 2;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const auto load = [&] {
      if (!gguf) return halo::text::Tokenizer::from_model_dir(argv[1]);
      std::ifstream md(argv[1]);
      if (!md) throw halo::Error(std::string("tokenize_dump: cannot open '") + argv[1] + "'");
      return halo::text::Tokenizer::from_gguf_metadata(nlohmann::json::parse(md), argv[1]);
    };
    const auto tok = load();
    const auto t1 = std::chrono::steady_clock::now();
    std::ifstream in(argv[2]);
    if (!in) throw halo::Error(std::string("tokenize_dump: cannot open '") + argv[2] + "'");
    std::vector<std::string> texts;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      texts.push_back(j.is_string() ? j.get<std::string>() : j.at("text").get<std::string>());
    }
    std::vector<std::vector<int32_t>> ids(texts.size()), plain(texts.size());
    const auto t2 = std::chrono::steady_clock::now();
    std::size_t n_tokens = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      ids[i] = tok.encode(texts[i], true);
      plain[i] = tok.encode(texts[i], false);
      n_tokens += ids[i].size();
    }
    const auto t3 = std::chrono::steady_clock::now();
    std::ofstream file;
    if (argc > 3) {
      file.open(argv[3]);
      if (!file) throw halo::Error(std::string("tokenize_dump: cannot write '") + argv[3] + "'");
    }
    std::ostream& out = argc > 3 ? file : std::cout;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      nlohmann::json j;
      j["ids"] = ids[i];
      j["ids_plain"] = plain[i];
      j["decoded"] = tok.decode(ids[i], true);
      j["decoded_raw"] = tok.decode(ids[i], false);
      j["decoded_plain"] = tok.decode(plain[i], true);
      out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
    using ms = std::chrono::duration<double, std::milli>;
    std::cerr << "tokenize_dump " << argv[1] << ": load " << ms(t1 - t0).count() << " ms, encode of "
              << texts.size() << " texts (x2, " << n_tokens << " tokens) " << ms(t3 - t2).count() << " ms\n";
  } catch (const std::exception& e) {
    std::cerr << "tokenize_dump: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
