// vLLM's reasoning parsers (serve/reasoning_parser.h): the expected splits
// are written by hand from the formats; every output is also fed in every
// two-piece split and byte by byte, which must give the same reasoning and
// content, with no <think> marker on either side.
#include "serve/reasoning_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

using halo::serve::ReasoningParser;

namespace {

std::pair<std::string, std::string> run(const char* name, const std::vector<std::string>& pieces) {
  auto p = ReasoningParser::make(name);
  std::string r, c;
  for (const auto& s : pieces) {
    auto d = p->feed(s);
    r += d.reasoning;
    c += d.content;
  }
  auto d = p->finish();
  return {r + d.reasoning, c + d.content};
}

void expect_split(const char* name, const std::string& out, const std::string& reasoning,
                  const std::string& content) {
  EXPECT_EQ(run(name, {out}), std::make_pair(reasoning, content)) << name << ": " << out;
  for (size_t i = 0; i <= out.size(); ++i)
    ASSERT_EQ(run(name, {out.substr(0, i), out.substr(i)}), std::make_pair(reasoning, content))
        << name << " split at " << i << ": " << out;
  std::vector<std::string> bytes;
  for (char ch : out) bytes.emplace_back(1, ch);
  EXPECT_EQ(run(name, bytes), std::make_pair(reasoning, content)) << name << " byte by byte";
}

TEST(ReasoningParser, Qwen3ReasonsOnlyWhenTheOutputOpensWithThink) {
  expect_split("qwen3", "<think>\nThe user asks 2+2.\n</think>\n\nIt is 4.",
               "\nThe user asks 2+2.\n", "\n\nIt is 4.");
  expect_split("qwen3", "It is 4.", "", "It is 4.");  // enable_thinking: false
  expect_split("qwen3", "Text with </think> inside", "", "Text with </think> inside");
  expect_split("qwen3", "<think>cut off before the end", "cut off before the end", "");
  expect_split("qwen3", "<thin", "", "<thin");  // never a marker: content
  expect_split("qwen3", "<think></think>", "", "");
  expect_split("qwen3", "<think>a < b </thin k</think>ok </think>", "a < b </thin k",
               "ok </think>");
}

TEST(ReasoningParser, DeepSeekR1ReasonsUntilTheEndMarker) {
  expect_split("deepseek_r1", "Let me think: 3*3=9.</think>The answer is 9.",
               "Let me think: 3*3=9.", "The answer is 9.");
  expect_split("deepseek_r1", "<think>again</think>done", "again", "done");
  expect_split("deepseek_r1", "no end marker at all", "no end marker at all", "");
  expect_split("deepseek_r1", "</think>only content", "", "only content");
  expect_split("deepseek_r1", "日本語の推論</think>答え", "日本語の推論", "答え");
}

TEST(ReasoningParser, UnknownNamesAreRefusedByName) {
  try {
    ReasoningParser::make("granite");
    ADD_FAILURE();
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek_r1 and qwen3"), std::string::npos);
  }
}

}  // namespace
