// The Responses API codec (serve/responses_api.h) without a server: input
// items as the chat messages OpenAI's docs define them to mean, the stored
// conversation that previous_response_id continues, and the output items and
// stream events built from reasoning, text and a tool call (the end-to-end
// test, responses_api.test.mjs, has no model that reasons). The expected
// values are written by hand from OpenAI's API reference.
#include "serve/responses_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/api_error.h"

using namespace halo::serve;

namespace {

ojson chat_of(const std::string& body, ResponseStore& store) {
  return ojson::parse(responses_to_chat(body, store).chat_body);
}

std::string param_of(const std::string& body) {
  ResponseStore store;
  try {
    responses_to_chat(body, store);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    return e.param();
  }
  ADD_FAILURE() << "accepted: " << body;
  return "";
}

// The SSE events' types and data, in order.
std::vector<ojson> events_of(const std::string& sse) {
  std::vector<ojson> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    out.push_back(ojson::parse(sse.substr(pos + 6, end - pos - 6)));
    pos = end;
  }
  return out;
}

}  // namespace

TEST(ResponsesRequest, InputItemsBecomeChatMessages) {
  ResponseStore store;
  const ojson chat = chat_of(R"({"model": "m", "instructions": "Be brief.", "input": [
      {"role": "developer", "content": "Use tools."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                       {"type": "input_text", "text": "b"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me see."}]},
      {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{\"x\":1}"},
      {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "one"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "two"}]}],
    "max_output_tokens": 9, "temperature": 0.5, "stream": true,
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false,
    "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}})",
                             store);
  const ojson expected = ojson::parse(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "system", "content": "Use tools."},
      {"role": "user", "content": "a\nb"},
      {"role": "assistant", "content": "Let me see.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}},
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "one"},
      {"role": "tool", "tool_call_id": "call_2", "content": "two"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "parallel_tool_calls": false,
    "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
    "max_tokens": 9, "temperature": 0.5, "stream": true})");
  EXPECT_EQ(chat, expected) << chat.dump(1);
}

TEST(ResponsesRequest, PreviousResponseContinuesWithoutItsInstructions) {
  ResponseStore store;
  store.put("resp_1", {ojson::object(), ojson::parse(R"([{"role": "user", "content": "hi"},
                                                          {"role": "assistant", "content": "hello"}])")});
  const auto r = responses_to_chat(
      R"({"previous_response_id": "resp_1", "instructions": "New.", "input": "again"})", store);
  const ojson conversation = ojson::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}])");
  EXPECT_EQ(r.conversation, conversation);
  ojson messages = conversation;
  messages.insert(messages.begin(), ojson{{"role", "system"}, {"content", "New."}});
  EXPECT_EQ(ojson::parse(r.chat_body)["messages"], messages);
  EXPECT_EQ(r.echo["previous_response_id"], "resp_1");
  EXPECT_EQ(r.echo["instructions"], "New.");
  EXPECT_TRUE(r.store);
}

TEST(ResponsesRequest, RefusalsNameTheField) {
  EXPECT_EQ(param_of(R"({"model": "m"})"), "input");
  EXPECT_EQ(param_of(R"({"input": {"role": "user"}})"), "input");
  EXPECT_EQ(param_of(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})"),
            "input");
  EXPECT_EQ(param_of(R"({"input": [{"type": "function_call", "name": "f"}]})"), "input");
  EXPECT_EQ(param_of(R"({"input": [{"type": "function_call_output", "call_id": "c"}]})"), "input");
  EXPECT_EQ(param_of(R"({"input": [{"type": "computer_call"}]})"), "input");
  EXPECT_EQ(param_of(R"({"input": "x", "tools": [{"type": "file_search"}]})"), "tools");
  EXPECT_EQ(param_of(R"({"input": "x", "tool_choice": {"type": "allowed_tools"}})"), "tool_choice");
  EXPECT_EQ(param_of(R"({"input": "x", "text": {"format": {"type": "yaml"}}})"), "text");
  EXPECT_EQ(param_of(R"({"input": "x", "max_output_tokens": -1})"), "max_output_tokens");
  EXPECT_EQ(param_of(R"({"input": "x", "background": true})"), "background");
  EXPECT_EQ(param_of(R"({"input": "x", "conversation": "conv_1"})"), "conversation");
  EXPECT_EQ(param_of(R"({"input": "x", "previous_response_id": "resp_none"})"),
            "previous_response_id");
  EXPECT_EQ(param_of(R"({"input": "x", "instructions": 3})"), "instructions");
  EXPECT_EQ(param_of(R"({"input": "x", "store": 1})"), "store");
}

TEST(ResponsesAnswer, ItemsAndEventsFromReasoningTextAndACall) {
  auto store = std::make_shared<ResponseStore>();
  ResponseStore none;
  auto req = responses_to_chat(R"({"input": "Weather?", "instructions": "Be brief."})", none);
  auto shape = responses_answer(std::move(req), "resp_x", "m", store);
  std::string sse;
  shape->begin(ChatEnd{nullptr, "", 5, 0}, sse);
  ChatDelta a{"think", "", {}};
  ChatDelta b{" more", "It is", {}};
  ChatDelta c{"",
              " sunny.",
              {ToolCallDelta{0, true, "get"}, ToolCallDelta{0, false, "{\"c\":"},
               ToolCallDelta{0, false, "1}"}}};
  for (const ChatDelta* d : {&a, &b, &c}) shape->add(*d, &sse);
  shape->end(ChatEnd{"stop", "", 5, 7}, sse);

  const std::vector<ojson> events = events_of(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], i);
    types.push_back(events[i]["type"]);
  }
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      // reasoning
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done",
      // message
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      // function call
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done", "response.completed"};
  EXPECT_EQ(types, expected);

  const ojson& r = events.back()["response"];
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["usage"]["input_tokens"], 5);
  EXPECT_EQ(r["usage"]["output_tokens"], 7);
  EXPECT_EQ(r["usage"]["total_tokens"], 12);
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0],
            (ojson{{"type", "reasoning_text"}, {"text", "think more"}}));
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "It is sunny.");
  EXPECT_EQ(r["output"][2]["name"], "get");
  EXPECT_EQ(r["output"][2]["arguments"], "{\"c\":1}");
  for (const auto& item : r["output"]) EXPECT_EQ(item["status"], "completed");
  // Deltas carry their item's index and id.
  EXPECT_EQ(events[4]["output_index"], 0);
  EXPECT_EQ(events[11]["output_index"], 1);
  EXPECT_EQ(events[11]["item_id"], r["output"][1]["id"]);
  EXPECT_EQ(events[17]["output_index"], 2);

  // Stored: the response as sent, and the conversation with this answer as
  // one assistant message (reasoning left out, the call's id the call_id).
  auto entry = store->get("resp_x");
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->response, r);
  const ojson conversation = ojson::parse(
      R"([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "It is sunny.",
          "tool_calls": [{"id": "", "type": "function", "function": {"name": "get", "arguments": "{\"c\":1}"}}]}])");
  ojson got = entry->conversation;
  got[1]["tool_calls"][0]["id"] = "";
  EXPECT_EQ(got, conversation);
  EXPECT_EQ(entry->conversation[1]["tool_calls"][0]["id"], r["output"][2]["call_id"]);
}

TEST(ResponsesAnswer, CutByMaxTokensIsIncompleteAndStoreFalseKeepsNothing) {
  auto store = std::make_shared<ResponseStore>();
  ResponseStore none;
  auto shape = responses_answer(responses_to_chat(R"({"input": "x", "store": false})", none),
                                "resp_y", "m", store);
  shape->add(ChatDelta{"", "abc", {}}, nullptr);
  const ojson r = shape->body(ChatEnd{"length", "", 1, 3});
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], (ojson{{"reason", "max_output_tokens"}}));
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["store"], false);
  EXPECT_EQ(store->get("resp_y"), nullptr);
}

TEST(ResponseStore, DropsTheLeastRecentPastItsBounds) {
  ResponseStore store(2, 1 << 20);
  store.put("a", {ojson::object(), ojson::array()});
  store.put("b", {ojson::object(), ojson::array()});
  EXPECT_TRUE(store.get("a"));  // read: a is recent again
  store.put("c", {ojson::object(), ojson::array()});
  EXPECT_TRUE(store.get("a"));
  EXPECT_FALSE(store.get("b"));
  EXPECT_TRUE(store.get("c"));
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_EQ(store.size(), 1u);

  ResponseStore small(100, 64);
  small.put("big", {ojson{{"text", std::string(100, 'x')}}, ojson::array()});
  EXPECT_FALSE(small.get("big"));  // larger than the whole store
  small.put("s1", {ojson::object(), ojson::parse(R"(["01234567890123456789"])")});
  small.put("s2", {ojson::object(), ojson::parse(R"(["01234567890123456789"])")});
  small.put("s3", {ojson::object(), ojson::parse(R"(["01234567890123456789"])")});
  EXPECT_LE(small.size(), 2u);
  EXPECT_TRUE(small.get("s3"));
}
