// The serving core without HTTP, as an in-process caller (the coming Python
// API, a gRPC frontend) uses it: a Generation with its own sink, started on a
// ServingCore over the real cpu plugin and the embedded model. The engine's
// own offline API (AsyncEngine::generate) is the reference for the output.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "serve/serving_core.h"

namespace fs = std::filesystem;
using namespace halo;
using namespace halo::serve;

namespace {

const fs::path kModelDir = fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m";

std::shared_ptr<ServedModel> demo_served_model() {
  engine::EngineConfig c;
  c.device = std::string(HALO_PLUGIN_DIR) + "/libhalo_plugin_cpu.so";
  c.max_model_len = 256;
  c.max_num_seqs = 16;
  c.max_kv_tokens = 1 << 13;
  c.block_size = 16;
  auto model = std::make_shared<const model::LoadedModel>(model::LoadedModel::load(kModelDir));
  auto eng = std::make_shared<engine::AsyncEngine>(c, model, text::Tokenizer::from_model_dir(kModelDir));
  return ServedModel::make({"demo"}, kModelDir.string(), eng, std::nullopt);
}

// Records every call, in order, and lets the test wait for the end.
class RecordingSink : public GenerationSink {
 public:
  std::vector<std::string> calls;  // "start", "output", "error", "finish"
  std::string text;                // the text of the on_output events, concatenated
  int error_status = 0;
  bool cancelled_at_finish = false;
  std::function<void(Generation&)> after_first_output;

  void on_start(Generation&) override { record("start"); }
  void on_output(Generation& g, size_t, const engine::StreamEvent& ev, size_t) override {
    record("output");
    text += ev.text;
    if (after_first_output) std::exchange(after_first_output, nullptr)(g);
  }
  void on_error(Generation& g) override {
    record("error");
    error_status = g.error_status();
  }
  void on_finish(Generation& g) override {
    std::lock_guard lk(mu_);
    calls.push_back("finish");
    cancelled_at_finish = g.cancelled();
    done_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return done_; });
  }

 private:
  void record(const char* what) {
    std::lock_guard lk(mu_);
    calls.push_back(what);
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

engine::RequestOptions greedy(int max_tokens) {
  engine::RequestOptions o;
  o.sampling.temperature = 0;
  o.sampling.max_tokens = max_tokens;
  o.sampling.ignore_eos = true;
  return o;
}

struct Fixture {
  std::shared_ptr<ServedModel> model = demo_served_model();
  ServingCore core{ServingConfig{}};
  Fixture() {
    core.add_model(model);
    core.set_ready();
  }
  std::vector<Prompt> prompt(const std::string& text) const {
    return {{text, true, model->tokenizer().encode(text, true)}};
  }
};

}  // namespace

TEST(ServingCore, AnInProcessCallerGetsWhatTheEngineGenerates) {
  Fixture f;
  auto prompts = f.prompt("What is curl?");
  auto want = f.model->engine->generate({{prompts[0].ids, greedy(24)}});

  auto sink = std::make_shared<RecordingSink>();
  auto g = std::make_shared<Generation>(f.model, "g1", prompts, greedy(24), sink);
  f.core.start(g);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(g->failed()) << g->error();
  EXPECT_EQ(g->choices().at(0).tokens, want.at(0).choices.at(0).token_ids);
  EXPECT_EQ(g->choices()[0].text, want[0].choices[0].text);
  EXPECT_EQ(sink->text, g->choices()[0].text);  // what the sink was told adds up to the output
  EXPECT_EQ(g->choices()[0].finish_reason, engine::FinishReason::kLength);
  EXPECT_EQ(g->completion_tokens(), 24);
  ASSERT_GE(sink->calls.size(), 3u);
  EXPECT_EQ(sink->calls.front(), "start");
  EXPECT_EQ(sink->calls.back(), "finish");
  EXPECT_TRUE(f.core.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(f.core.active_requests(), 0u);
}

TEST(ServingCore, SeveralPromptsWithNChoicesArePromptMajor) {
  Fixture f;
  auto prompts = f.prompt("The package");
  auto second = f.prompt("What is curl?");
  prompts.push_back(second[0]);
  auto o = greedy(8);
  o.n = 2;
  auto sink = std::make_shared<RecordingSink>();
  auto g = std::make_shared<Generation>(f.model, "g2", prompts, o, sink);
  f.core.start(g);
  ASSERT_TRUE(sink->wait());
  ASSERT_EQ(g->choices().size(), 4u);
  for (size_t p = 0; p < 2; ++p) {
    auto want = f.model->engine->generate({{prompts[p].ids, greedy(8)}});
    for (size_t i = 0; i < 2; ++i)  // greedy: both choices of a prompt are its one greedy answer
      EXPECT_EQ(g->choices()[p * 2 + i].tokens, want[0].choices[0].token_ids) << "prompt " << p << " choice " << i;
  }
  EXPECT_EQ(g->prompt_tokens(), static_cast<int64_t>(prompts[0].ids.size() + prompts[1].ids.size()));
}

TEST(ServingCore, CancelStopsTheEngineAndTheSinkHearsOnlyTheEnd) {
  Fixture f;
  auto sink = std::make_shared<RecordingSink>();
  sink->after_first_output = [](Generation& g) { g.cancel(); };
  auto g = std::make_shared<Generation>(f.model, "g3", f.prompt("The package"), greedy(200), sink);
  f.core.start(g);
  ASSERT_TRUE(sink->wait());
  EXPECT_TRUE(sink->cancelled_at_finish);
  EXPECT_FALSE(g->failed()) << "a caller leaving is not a failure";
  EXPECT_LT(g->completion_tokens(), 200);
  size_t outputs = 0;
  for (const auto& c : sink->calls) outputs += c == "output";
  EXPECT_EQ(outputs, 1u) << "no output after cancel";
  EXPECT_TRUE(f.core.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
}

TEST(ServingCore, AbortAllFailsRunningGenerationsWith503) {
  Fixture f;
  auto sink = std::make_shared<RecordingSink>();
  ServingCore* core = &f.core;
  sink->after_first_output = [core](Generation&) { core->abort_all("test"); };
  auto g = std::make_shared<Generation>(f.model, "g4", f.prompt("The package"), greedy(200), sink);
  f.core.start(g);
  ASSERT_TRUE(sink->wait());
  EXPECT_TRUE(g->failed());
  EXPECT_EQ(g->error_status(), 503);
  EXPECT_EQ(sink->error_status, 503);
  EXPECT_EQ(sink->calls.back(), "finish");
}

TEST(ServingCore, AdmissionAndRoutingErrorsCarryTheirStatus) {
  ServingConfig cfg;
  cfg.max_queued_requests = 1;
  ServingCore core(cfg);
  auto expect_status = [](int status, auto&& f) {
    try {
      f();
      ADD_FAILURE() << "no error, want " << status;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), status) << e.what();
    }
  };
  const std::string demo = "demo", other = "other";
  expect_status(503, [&] { core.find_model(nullptr); });  // still loading
  auto model = demo_served_model();
  core.add_model(model);
  core.refuse_model(other, "config.json does not parse");
  core.set_ready();
  EXPECT_EQ(core.find_model(&demo), model);
  expect_status(404, [&] { core.find_model(&other); });
  const std::string unknown = "nope";
  expect_status(404, [&] { core.find_model(&unknown); });

  // Two prompts into a queue of one: 429 before anything runs.
  auto ids = model->tokenizer().encode("The package", true);
  auto sink = std::make_shared<RecordingSink>();
  auto g = std::make_shared<Generation>(model, "g5", std::vector<Prompt>{{"", false, ids}, {"", false, ids}},
                                        greedy(4), sink);
  expect_status(429, [&] { core.start(g); });
  EXPECT_TRUE(sink->calls.empty());
  EXPECT_EQ(core.active_requests(), 0u);
  // A prompt over the context is refused by the engine's validation, also before anything runs.
  auto long_g = std::make_shared<Generation>(
      model, "g6", std::vector<Prompt>{{"", false, std::vector<int32_t>(300, 5)}}, greedy(4), sink);
  EXPECT_THROW(core.start(long_g), Error);
  EXPECT_EQ(core.active_requests(), 0u);
}
