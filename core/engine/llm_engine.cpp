#include "engine/llm_engine.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>

#include "engine/block_hash.h"
#include "common/error.h"
#include "model/hf_hub.h"
#include "text/guided/token_mask.h"

namespace halo::engine {

namespace {
std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

// KV arithmetic: how many blocks the budget buys, logged so users can check
// it; an Error when one sequence of max_model_len does not fit.
// `draft_per_block`: a draft model's KV bytes per block, held beside the target's.
int64_t kv_block_count(const EngineConfig& config, const halo_limits& limits, const halo_model_spec& spec,
                       const device::Plugin& plugin, uint64_t draft_per_block) {
  const int bs = limits.block_size;
  const uint64_t per_block = limits.kv_bytes_per_block + draft_per_block;
  const uint64_t per_token = per_block / bs;
  int64_t num_blocks = 0;
  std::string source;
  const int64_t blocks_per_seq = (limits.max_model_len + bs - 1) / bs;
  if (config.max_kv_tokens > 0) {
    num_blocks = (config.max_kv_tokens + bs - 1) / bs;
    source = fmt::format("--max-kv-tokens={}", config.max_kv_tokens);
  } else if (config.kv_cache_memory > 0) {
    num_blocks = static_cast<int64_t>(config.kv_cache_memory / per_block);
    source = fmt::format("--kv-cache-memory={}", human_bytes(double(config.kv_cache_memory)));
  } else {
    double budget = double(limits.kv_memory_available) * config.device_memory_utilization;
    num_blocks = static_cast<int64_t>(budget / double(per_block));
    source = fmt::format("--device-memory-utilization={} of {} available",
                         config.device_memory_utilization,
                         human_bytes(double(limits.kv_memory_available)));
    // More blocks than every sequence at full length can use is wasted memory.
    int64_t useful = blocks_per_seq * limits.max_num_seqs;
    if (num_blocks > useful) {
      num_blocks = useful;
      source += fmt::format(", capped at max_num_seqs={} x max_model_len={}", limits.max_num_seqs,
                            limits.max_model_len);
    }
  }
  num_blocks = std::min<int64_t>(num_blocks, std::numeric_limits<int32_t>::max());
  spdlog::info(
      "KV cache: {} bytes/token ({} per layer x {} layers, {}), block_size={} -> {} bytes/block",
      per_token, per_token / std::max(1, spec.num_layers), spec.num_layers,
      plugin.api().abi_minor >= 2 ? halo_kv_dtype_name(limits.kv_cache_dtype)
                                    : "dtype not reported",
      bs, per_block);
  spdlog::info("KV cache: {} blocks = {} tokens ({}) from {}", num_blocks, num_blocks * bs,
               human_bytes(double(num_blocks) * double(per_block)), source);
  if (num_blocks < blocks_per_seq) {
    int64_t fits = num_blocks * bs;
    throw Error(fmt::format(
        "--max-model-len={} needs {} KV blocks of {} tokens for one sequence, but only {} "
        "fit in the KV budget ({}); use --max-model-len {} or less, or give the cache "
        "more memory",
        limits.max_model_len, blocks_per_seq, bs, num_blocks, source, std::max<int64_t>(fits, 0)));
  }
  return num_blocks;
}

}  // namespace

LLMEngine::LLMEngine(const EngineConfig& config, std::shared_ptr<const model::LoadedModel> model)
    : config_(config), model_(std::move(model)) {
  const auto& mc = model_->config();
  const halo_model_spec& spec = mc.spec;
  plugin_ = device::Plugin::load(config_.device);
  device::Options options = config_.plugin_options;
  if (config_.threads > 0) options.emplace_back("threads", std::to_string(config_.threads));
  device_ = std::make_shared<device::Device>(plugin_, config_.device_index, options);

  // Propose limits (0 = the device's choice); the plugin answers with what it
  // will honour. A static-shape device answers with its compiled limits.
  if (config_.max_model_len > 0 && mc.max_position_embeddings > 0 &&
      config_.max_model_len > mc.max_position_embeddings) {
    throw Error(fmt::format("--max-model-len={} exceeds the model's max_position_embeddings={}",
                            config_.max_model_len, mc.max_position_embeddings));
  }
  std::optional<spec::SpeculativeConfig> speculative;
  if (!config_.speculative_config.empty()) speculative = spec::parse_speculative_config(config_.speculative_config);
  if (config_.enable_lora) check_lora_device();
  limits_ = propose_limits(config_, *plugin_);
  limits_.num_speculative_tokens = speculative ? speculative->num_speculative_tokens : 0;
  std::vector<halo_named_tensor> weights(model_->weights().begin(), model_->weights().end());
  executable_ = std::make_shared<device::Executable>(device_, spec, weights, limits_, options,
                                                     model_->quantized_weights());
  limits_ = executable_->limits();
  check_agreed_limits(config_, limits_, *plugin_);
  if (!config_.enable_chunked_prefill && limits_.max_num_batched_tokens < limits_.max_model_len) {
    throw Error(
        fmt::format("without chunked prefill --max-num-batched-tokens={} must be at least "
                    "--max-model-len={}",
                    limits_.max_num_batched_tokens, limits_.max_model_len));
  }

  const int bs = limits_.block_size;
  if (speculative) check_verify_limit(speculative->num_speculative_tokens);
  auto draft = speculative && speculative->method == spec::SpeculativeConfig::Method::kDraftModel
                   ? load_draft(*speculative, options)
                   : nullptr;
  // The draft's prepare answered after the target's weights were in: its
  // budget is what both leave.
  halo_limits kv_limits = limits_;
  if (draft)
    kv_limits.kv_memory_available = std::min(kv_limits.kv_memory_available, draft->limits().kv_memory_available);
  const int64_t num_blocks =
      kv_block_count(config_, kv_limits, spec, *plugin_, draft ? draft->kv_bytes_per_block() : 0);
  kv_cache_ = std::make_unique<device::KvCache>(executable_, static_cast<int>(num_blocks), bs);
  blocks_ = std::make_unique<KvBlockManager>(
      static_cast<int>(num_blocks), bs, config_.enable_prefix_caching,
      block_hash_root(config_.prefix_hash_seed, config_.served_model_name));
  if (config_.enable_kv_cache_events) blocks_->enable_events();

  SchedulerConfig sc;
  sc.max_num_seqs = limits_.max_num_seqs;
  sc.max_num_batched_tokens = limits_.max_num_batched_tokens;
  sc.max_model_len = limits_.max_model_len;
  sc.chunked_prefill =
      config_.enable_chunked_prefill && (limits_.capabilities & HALO_CAP_CHUNKED_PREFILL);
  sc.mixed_batch = (limits_.capabilities & HALO_CAP_MIXED_BATCH) != 0;
  sc.max_loras = config_.enable_lora ? limits_.max_loras : 0;
  if (!sc.chunked_prefill && sc.max_num_batched_tokens < sc.max_model_len) {
    throw Error(fmt::format(
        "device '{}' cannot split prompts, so max_num_batched_tokens={} must be at least "
        "max_model_len={}",
        plugin_->name(), sc.max_num_batched_tokens, sc.max_model_len));
  }
  eos_ids_ = mc.eos_token_ids;
  sc.eos_token_ids = eos_ids_;
  scheduler_ = std::make_unique<Scheduler>(sc, *blocks_);
  runner_ = std::make_unique<ModelRunner>(*kv_cache_, spec.vocab_size);
  if (config_.enable_lora) {
    runner_->enable_lora(std::make_unique<LoraSlots>(*executable_, limits_.max_loras));
    loras_ = std::make_shared<LoraRegistry>(mc, limits_.max_lora_rank, config_.max_cpu_loras);
    spdlog::info("LoRA: {} adapter slots of rank up to {} on {}", limits_.max_loras,
                 limits_.max_lora_rank, plugin_->name());
  }
  if (speculative) start_speculation(std::move(*speculative), std::move(draft));
  spdlog::info(
      "engine ready on {} ({}): max_num_seqs={} max_model_len={} max_num_batched_tokens={} "
      "chunked_prefill={} prefix_caching={}",
      plugin_->name(), device_->info().name, sc.max_num_seqs, sc.max_model_len,
      sc.max_num_batched_tokens, sc.chunked_prefill, config_.enable_prefix_caching);
}

LLMEngine::~LLMEngine() = default;

// The draft: a directory, or a Hugging Face id found in (or downloaded into)
// the Hub cache as the target's is (HF_TOKEN, HF_HUB_OFFLINE, ...).
std::unique_ptr<spec::DraftModelProposer> LLMEngine::load_draft(const spec::SpeculativeConfig& sc,
                                                                const device::Options& options) {
  std::shared_ptr<const model::LoadedModel> draft;
  std::filesystem::path dir;
  try {
    model::HubOptions hub;
    hub.revision = sc.revision;
    dir = model::resolve_model(sc.model, hub);
    draft = std::make_shared<const model::LoadedModel>(model::LoadedModel::load(dir, load_options(config_)));
  } catch (const Error& e) {
    throw Error(fmt::format("speculative_config model '{}': {}", sc.model, e.what()));
  }
  spdlog::info("speculative decoding: draft model {}{}", sc.model,
               dir.string() == sc.model ? "" : " (" + dir.string() + ")");
  return std::make_unique<spec::DraftModelProposer>(device_, std::move(draft), model_->config().spec.vocab_size,
                                                    limits_, options);
}

// A verify is 1 + k query tokens of one decoding sequence in a decode step;
// the device said how many it runs (ABI v1.5 halo_limits.num_speculative_tokens:
// a static-shape device only has the verify graphs it was compiled with).
void LLMEngine::check_verify_limit(int num_speculative_tokens) const {
  const int agreed = limits_.num_speculative_tokens;
  if (agreed >= num_speculative_tokens) return;
  const bool fixed = device_->info().capabilities & HALO_CAP_STATIC_SHAPES;
  if (agreed == 0)
    throw Error(fmt::format(
        "speculative decoding: device '{}' has no verify step for this model{}",
        plugin_->name(),
        fixed ? fmt::format("; compile it with `halo compile --num-speculative-tokens {}`",
                            num_speculative_tokens)
              : std::string()));
  throw Error(fmt::format(
      "speculative_config num_speculative_tokens={} contradicts the device: plugin '{}' verifies "
      "at most {} proposed tokens per sequence{}",
      num_speculative_tokens, plugin_->name(), agreed,
      fixed ? " (the model was compiled with --num-speculative-tokens " + std::to_string(agreed) + ")"
            : std::string()));
}

void LLMEngine::start_speculation(spec::SpeculativeConfig sc, std::unique_ptr<spec::DraftModelProposer> draft) {
  for (const auto& key : sc.ignored) spdlog::info("speculative_config: '{}' has no effect in halo", key);
  if (draft) {
    draft->attach(*blocks_);
    install_proposer(std::move(draft));
  } else {
    install_proposer(spec::make_ngram_proposer(sc.prompt_lookup_min, sc.prompt_lookup_max));
  }
  // Past a few sequences a step is no longer bound by reading the weights,
  // so verifying proposals costs what they save (docs/speculative.md).
  spec_disable_batch_ = sc.disable_by_batch_size > 0 ? sc.disable_by_batch_size : kDefaultSpecDisableBatch;
  stats_.spec_accepted_per_pos.assign(static_cast<size_t>(sc.num_speculative_tokens), 0);
  spdlog::info("speculative decoding: {} (off from {} running sequences)", sc.to_json(), spec_disable_batch_);
  spec_ = std::move(sc);
}

void LLMEngine::set_proposer(std::unique_ptr<spec::Proposer> proposer, int num_speculative_tokens) {
  // A dynamic-shape device was prepared without a proposal (0) but runs any
  // verify; a fixed-shape one only what it was compiled for.
  if (device_->info().capabilities & HALO_CAP_STATIC_SHAPES) check_verify_limit(num_speculative_tokens);
  if (!spec_) {
    spec::SpeculativeConfig sc;
    sc.num_speculative_tokens = num_speculative_tokens;
    spec_ = sc;
    spec_disable_batch_ = kDefaultSpecDisableBatch;
  }
  spec_->num_speculative_tokens = num_speculative_tokens;
  stats_.spec_accepted_per_pos.resize(static_cast<size_t>(num_speculative_tokens), 0);
  install_proposer(std::move(proposer));
}

void LLMEngine::install_proposer(std::unique_ptr<spec::Proposer> proposer) {
  if (proposer->wants_hidden_states()) {
    check_hidden_states("speculative decoding: the proposer reads the target's hidden states");
    runner_->request_hidden_states(model_->config().spec.hidden_size);
  }
  proposer_ = std::move(proposer);
}

// --enable-lora on a device without adapter slots: say why, before loading.
void LLMEngine::check_lora_device() const {
  if (device_->has_lora()) return;
  throw Error(fmt::format(
      "--enable-lora: device '{}' ({}) cannot run LoRA adapters (no HALO_CAP_LORA, ABI v1.6){}",
      plugin_->name(), device_->info().name,
      (device_->info().capabilities & HALO_CAP_STATIC_SHAPES)
          ? ": its models are compiled ahead of time by `halo compile` into fixed graphs that "
            "have no adapter inputs; merge an adapter into the base weights before compiling"
          : ""));
}

void LLMEngine::check_hidden_states(const char* who) const {
  if (!device_->has_hidden_states())
    throw Error(
        fmt::format("{}, which plugin '{}' does not return (no HALO_CAP_HIDDEN_STATES, ABI v1.5)",
                    who, plugin_->name()));
}

void LLMEngine::check_beam_allowed() const {
  if (spec_)
    throw Error("beam search cannot be combined with speculative decoding (speculative_config is set on this model)");
}

void LLMEngine::validate_request(const std::vector<int32_t>& prompt_ids,
                                 const SamplingParams& params) const {
  params.validate();
  if (prompt_ids.empty()) throw Error("the prompt is empty");
  const int vocab = model_->config().spec.vocab_size;
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= vocab)
      throw Error(fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab));
  }
  if (params.lora) check_lora(*params.lora);
  if (params.pooling.active()) {
    check_hidden_states("a pooling (embedding) request reads the model's hidden states");
    if (static_cast<int>(prompt_ids.size()) > limits_.max_model_len)
      throw Error(fmt::format("the prompt has {} tokens but max_model_len is {}", prompt_ids.size(),
                              limits_.max_model_len));
    return;
  }
  if (static_cast<int>(prompt_ids.size()) >= limits_.max_model_len) {
    throw Error(
        fmt::format("the prompt has {} tokens but max_model_len is {}, leaving no room to generate",
                    prompt_ids.size(), limits_.max_model_len));
  }
}

void LLMEngine::check_lora(const LoraRequest& lora) const {
  if (!loras_)
    throw Error(fmt::format("LoRA adapter '{}': LoRA is not enabled on this model (--enable-lora)",
                            lora.name));
  if (lora.adapter->max_rank() > limits_.max_lora_rank)
    throw Error(fmt::format("LoRA adapter '{}' has rank {}, above --max-lora-rank={}", lora.name,
                            lora.adapter->max_rank(), limits_.max_lora_rank));
}

void LLMEngine::add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                            SamplingParams params, int priority) {
  add_request_group({request_id}, prompt_ids, {std::move(params)}, priority);
}

void LLMEngine::check_new_ids(const std::vector<std::string>& request_ids) const {
  for (size_t i = 0; i < request_ids.size(); ++i) {
    const auto& id = request_ids[i];
    if (live_.count(id) ||
        std::find(request_ids.begin(), request_ids.begin() + i, id) != request_ids.begin() + i)
      throw Error(fmt::format("request id {} is already in use", id));
  }
}

void LLMEngine::add_request_group(const std::vector<std::string>& request_ids,
                                  const std::vector<int32_t>& prompt_ids,
                                  std::vector<SamplingParams> params, int priority) {
  if (request_ids.empty() || request_ids.size() != params.size())
    throw Error(
        fmt::format("a request group needs one sampling parameter set per id ({} ids, {} sets)",
                    request_ids.size(), params.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    try {
      validate_request(prompt_ids, params[i]);
    } catch (const Error& e) {
      throw Error(fmt::format("request {}: {}", request_ids[i], e.what()));
    }
  }
  check_new_ids(request_ids);
  if (params[0].pooling.active()) runner_->request_hidden_states(model_->config().spec.hidden_size);
  std::vector<std::shared_ptr<Sequence>> followers;
  auto leader = make_sequence(request_ids[0], prompt_ids, std::move(params[0]), priority);
  for (size_t i = 1; i < request_ids.size(); ++i)
    followers.push_back(make_sequence(request_ids[i], prompt_ids, std::move(params[i]), priority));
  scheduler_->add_group(std::move(leader), std::move(followers));
}

void LLMEngine::add_beam_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                                 SamplingParams params, const BeamParams& beam, int priority) {
  validate_request(prompt_ids, params);
  check_beam_allowed();
  if (params.pooling.active())
    throw Error("beam search cannot pool (embedding requests sample nothing)");
  if (beam.width < 1 || beam.width > limits_.max_num_seqs)
    throw Error(fmt::format("beam width {} must be in [1, max_num_seqs={}]", beam.width,
                            limits_.max_num_seqs));
  check_new_ids({request_id});
  const int prompt_len = static_cast<int>(prompt_ids.size());
  std::vector<int32_t> stops = params.stop_token_ids;
  if (!params.ignore_eos) stops.insert(stops.end(), eos_ids_.begin(), eos_ids_.end());
  const int max_tokens = std::min(params.max_tokens, limits_.max_model_len - prompt_len);
  // Each beam's step yields its 2W most likely next tokens (the sampled one is unused).
  params.logprobs = 2 * beam.width;
  params.temperature = 0.0f;
  params.min_tokens = 0;
  auto seq = make_sequence(request_id, prompt_ids, std::move(params), priority);
  seq->beam = std::make_shared<BeamGroup>(
      BeamSearch(beam, prompt_len, max_tokens, std::move(stops)), request_id);
  seq->beam->beams = {seq};
  seq->beam->offers = {std::nullopt};
  scheduler_->add(std::move(seq));
}

std::shared_ptr<Sequence> LLMEngine::make_sequence(const std::string& request_id,
                                                   const std::vector<int32_t>& prompt_ids,
                                                   SamplingParams params, int priority) {
  auto seq = std::make_shared<Sequence>();
  seq->request_id = request_id;
  seq->arrival = next_arrival_++;
  seq->priority = priority;
  seq->prompt_ids = prompt_ids;
  seq->rng.seed(params.seed ? *params.seed : config_.seed * 0x9E3779B97F4A7C15ull + seq->arrival);
  seq->params = std::move(params);
  if (const auto& lora = seq->params.lora) {
    seq->lora_id = lora->id;
    seq->hash_root = block_hash_root(config_.prefix_hash_seed, lora->cache_name);
  }
  if (seq->params.guide) {
    seq->guide.state = seq->params.guide->start();
    seq->guide.waiting = seq->params.guide_gate.active() && seq->params.guide_gate.open;
  }
  live_[request_id] = seq;
  return seq;
}

bool LLMEngine::abort_request(const std::string& request_id, FinishReason reason) {
  bool found = scheduler_->abort(request_id, reason);
  live_.erase(request_id);
  return found;
}

std::vector<RequestOutput> LLMEngine::step() {
  std::vector<RequestOutput> outputs;
  propose();
  SchedulerOutput sched = scheduler_->schedule();
  stats_.num_preemptions += sched.num_preempted;
  if (sched.empty()) return outputs;
  const auto start = std::chrono::steady_clock::now();
  runner_->execute(sched);
  if (proposer_) proposer_->after_step(sched, *runner_);
  stats_.step_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.steps++;
  stats_.last_step_tokens = sched.num_batched_tokens;
  stats_.batched_tokens += sched.num_batched_tokens;
  stats_.batched_seqs += sched.scheduled.size();
  std::vector<StepResult> results(sched.scheduled.size());
  std::vector<size_t> had(sched.scheduled.size());  // output tokens before the step
  for (size_t i = 0; i < sched.scheduled.size(); ++i) {
    read_step(sched, i, results[i]);
    had[i] = sched.scheduled[i].seq->output_ids.size();
  }
  const auto copies = scheduler_->update_from_step(sched, results);
  kv_cache_->copy_blocks(copies.src, copies.dst);
  if (proposer_) proposer_->copy_blocks(copies.src, copies.dst);
  for (size_t i = 0; i < sched.scheduled.size(); ++i) {
    const Sequence& seq = *sched.scheduled[i].seq;
    if (!results[i].sampled() && !(seq.params.pooling.active() && seq.finished())) continue;
    if (seq.beam) {
      stats_.generation_tokens++;
      if (BeamGroup& g = *seq.beam; g.search.done() && !g.reported)
        outputs.push_back(beam_output(g));
      continue;
    }
    RequestOutput out;
    out.request_id = seq.request_id;
    out.new_token_ids.assign(seq.output_ids.begin() + static_cast<std::ptrdiff_t>(had[i]), seq.output_ids.end());
    stats_.generation_tokens += out.new_token_ids.size();
    out.finished = seq.finished();
    out.finish_reason = seq.finish_reason;
    out.seq = live_.at(seq.request_id);
    outputs.push_back(std::move(out));
  }
  for (const auto& o : outputs)
    if (o.finished) live_.erase(o.request_id);
  return outputs;
}

// The one output of a finished beam search.
RequestOutput LLMEngine::beam_output(BeamGroup& g) {
  g.reported = true;
  RequestOutput out;
  out.request_id = g.request_id;
  out.finished = true;
  out.beams = g.search.results();
  out.finish_reason = out.beams.empty() ? FinishReason::kLength : out.beams.front().finish_reason;
  out.seq = live_.at(g.request_id);
  return out;
}

// Reads what the device computed for scheduled sequence i (its sequence is not
// written: the scheduler applies the result): new prompt logprobs and, at the
// end of its tokens, the chosen token(s).
void LLMEngine::read_step(const SchedulerOutput& sched, size_t i, StepResult& result) {
  const ScheduledSequence& s = sched.scheduled[i];
  Sequence& seq = *s.seq;
  const int prompt_len = static_cast<int>(seq.prompt_ids.size());
  stats_.prompt_tokens += std::clamp(prompt_len - seq.num_computed_tokens, 0, s.num_tokens);
  read_prompt_logprobs(seq, i, result);
  if (seq.params.pooling.active()) return read_pooling(seq, i, result);
  const auto& rows = runner_->sample_rows(i);
  if (rows.count == 0) return;
  if (s.num_spec > 0) return verify(s, rows.first_row, result);
  std::span<float> logits(runner_->logits_at(rows.first_row), model_->config().spec.vocab_size);
  mask_row(seq.params, seq.output_ids.size(), seq.guide, logits);
  // The sampler advances the sequence's own generator (its only write here).
  SampleResult r = sampler_.sample(logits, seq.params, seq.prompt_ids, seq.output_ids, seq.rng);
  result.tokens.push_back(std::move(r.sampled));
}

void LLMEngine::read_prompt_logprobs(const Sequence& seq, size_t i, StepResult& result) {
  if (seq.params.prompt_logprobs < 0) return;
  const auto& pr = runner_->prompt_rows(i);
  const int vocab = model_->config().spec.vocab_size;
  for (int k = 0; k < pr.count; ++k) {
    const size_t have = seq.prompt_logprobs.size() + result.prompt_logprobs.size();
    if (pr.first_position + k != static_cast<int>(have)) continue;  // recomputed
    std::span<const float> l(runner_->logits_at(pr.first_row + k), vocab);
    result.prompt_logprobs.push_back(
        token_logprob(l, seq.prompt_ids[pr.first_position + k + 1], seq.params.prompt_logprobs));
  }
}

// A pooling request: the hidden states of the positions computed this step
// go into its pooled state; at the end of the prompt, its embedding.
void LLMEngine::read_pooling(const Sequence& seq, size_t i, StepResult& result) {
  const PoolingParams& p = seq.params.pooling;
  const int width = static_cast<int>(model_->config().spec.hidden_size);
  PoolState st = seq.pool;
  if (const auto& pr = runner_->prompt_rows(i); pr.count > 0)
    pool_rows(p, st, pr.first_position, pr.count, width, runner_->hidden_at(pr.first_row));
  if (const auto& rows = runner_->sample_rows(i); rows.count > 0) {
    const int n = static_cast<int>(seq.prompt_ids.size());
    const float* last = runner_->hidden_at(rows.first_row);
    pool_rows(p, st, n - 1, 1, width, last);
    result.embedding = finish_pooling(p, st, n, last, width);
  }
  result.pool = std::move(st);
}

// A verify: row j is processed as the step after proposals [0, j) would
// process it (output length, guide, penalties' history), so a greedy verify
// chooses exactly the tokens plain decoding would. Logprobs are the target's.
void LLMEngine::verify(const ScheduledSequence& s, int first_row, StepResult& result) {
  Sequence& seq = *s.seq;
  const SamplingParams& p = seq.params;
  const int vocab = model_->config().spec.vocab_size;
  const std::span<const int32_t> drafts(seq.spec_ids.data(), static_cast<size_t>(s.num_spec));
  const size_t out_len = seq.output_ids.size();
  history_.assign(seq.output_ids.begin(), seq.output_ids.end());
  GuideCursor cursor = seq.guide;
  auto dist_of = [&](int j) -> const TokenDist& {
    for (size_t h = history_.size(); h < out_len + static_cast<size_t>(j); ++h) {
      if (p.guide) cursor = advance_guide(p, cursor, h, drafts[h - out_len]);
      history_.push_back(drafts[h - out_len]);
    }
    std::span<float> row(runner_->logits_at(first_row + j), vocab);
    mask_row(p, out_len + static_cast<size_t>(j), cursor, row);
    work_.assign(row.begin(), row.end());  // the masked row stays for the logprobs
    return sampler_.distribution(work_, p, seq.prompt_ids, history_);
  };
  accepted_.clear();
  auto q = proposer_->proposal_dists(seq);
  if (q.size() > drafts.size()) q = q.first(drafts.size());
  const int n = spec::verify_proposals(drafts, q, dist_of, seq.rng, accepted_, accept_rule_);
  for (size_t j = 0; j < accepted_.size(); ++j) {
    std::span<const float> row(runner_->logits_at(first_row + static_cast<int>(j)), vocab);
    result.tokens.push_back(token_logprob(row, accepted_[j], std::max(0, p.logprobs)));
  }
  stats_.spec_num_drafts++;
  stats_.spec_num_draft_tokens += drafts.size();
  stats_.spec_num_accepted_tokens += static_cast<uint64_t>(n);
  for (int j = 0; j < n; ++j) stats_.spec_accepted_per_pos[static_cast<size_t>(j)]++;
}

// Asks the proposer for tokens to follow every sequence about to decode,
// while few enough run that a step costs one read of the weights.
void LLMEngine::propose() {
  if (!proposer_) return;
  const auto& running = scheduler_->running();
  const int k = spec_->num_speculative_tokens;
  propose_batch_.clear();
  const auto busy = std::count_if(running.begin(), running.end(), [](const auto& q) { return !q->finished(); });
  for (const auto& sp : running) {
    Sequence& seq = *sp;
    seq.spec_ids.clear();
    if (busy >= spec_disable_batch_ || seq.beam || seq.finished() ||
        seq.num_computed_tokens + 1 != seq.num_tokens())
      continue;
    // Room for the proposals and the token after them.
    const int room = std::min(seq.params.max_tokens - static_cast<int>(seq.output_ids.size()),
                              limits_.max_model_len - seq.num_tokens()) - 1;
    if (std::min(k, room) > 0) propose_batch_.push_back({&seq, std::min(k, room)});
  }
  if (propose_batch_.empty()) return;
  proposer_->propose(propose_batch_);
  // Structured output: a proposal the grammar forbids would only be rejected.
  for (const auto& r : propose_batch_) {
    Sequence& seq = *r.seq;
    if (!seq.params.guide) continue;
    GuideCursor c = seq.guide;
    for (size_t j = 0; j < seq.spec_ids.size(); ++j) {
      const size_t index = seq.output_ids.size() + j;
      if (!guide_allows(seq.params, c, index, seq.spec_ids[j])) {
        seq.spec_ids.resize(j);
        break;
      }
      c = advance_guide(seq.params, c, index, seq.spec_ids[j]);
    }
  }
}

bool LLMEngine::guide_allows(const SamplingParams& p, GuideCursor c, size_t index, int32_t token) const {
  if (c.waiting) return true;
  if (p.guide_gate.active() && index == 0 && token == p.guide_gate.start) return true;
  const auto& g = *p.guide;
  if (std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) return g.accepting(c.state);
  if (token < 0 || token >= g.vocab_size()) return false;
  const auto& mask = *g.allowed(c.state);
  return (mask[static_cast<size_t>(token) / 64] >> (token % 64)) & 1u;
}

// What the sampler must never choose at output token number `output_len`:
// end-of-sequence and stop ids before min_tokens, and what the guide forbids.
void LLMEngine::mask_row(const SamplingParams& p, size_t output_len, GuideCursor c, std::span<float> logits) const {
  const int vocab = static_cast<int>(logits.size());
  if (static_cast<int>(output_len) < p.min_tokens) {
    const float ninf = -std::numeric_limits<float>::infinity();
    if (!p.ignore_eos)
      for (int32_t e : eos_ids_)
        if (e >= 0 && e < vocab) logits[e] = ninf;
    for (int32_t e : p.stop_token_ids)
      if (e >= 0 && e < vocab) logits[e] = ninf;
  }
  if (p.guide && !c.waiting) apply_guide(p, c, output_len, logits);
}

// Guided decoding: every token that would break the constraint is impossible;
// end-of-sequence only where the output is complete (then it is the only choice
// when nothing may follow). A first token that opens the reasoning stays possible.
void LLMEngine::apply_guide(const SamplingParams& p, GuideCursor c, size_t output_len, std::span<float> logits) const {
  const auto& g = *p.guide;
  const bool complete = g.accepting(c.state);
  const int vocab = static_cast<int>(logits.size());
  std::vector<std::pair<int32_t, float>> eos;  // EOS is a special token: masked below
  for (int32_t e : eos_ids_)
    if (e >= 0 && e < vocab) eos.push_back({e, logits[static_cast<size_t>(e)]});
  const int32_t think = p.guide_gate.active() && output_len == 0 ? p.guide_gate.start : -1;
  const float think_logit = think >= 0 && think < vocab ? logits[static_cast<size_t>(think)] : 0.0f;
  bool any = text::guided::apply_mask(*g.allowed(c.state), g.vocab_size(), logits.data(), vocab);
  if (think >= 0 && think < vocab) logits[static_cast<size_t>(think)] = think_logit, any = true;
  // EOS keeps its logit where the text is complete, -inf included (min_tokens
  // not reached yet). When nothing else may follow, the constraint wins over
  // min_tokens: a dead end ends the sequence rather than leave every token
  // masked (which sampled one outside the language).
  if (complete)
    for (const auto& [e, v] : eos) logits[static_cast<size_t>(e)] = v, any |= v != -INFINITY;
  if (!any && !eos.empty()) logits[static_cast<size_t>(eos[0].first)] = 0.0f;
}

std::vector<KvCacheEvent> LLMEngine::take_kv_events() { return blocks_->take_events(); }

EngineStats LLMEngine::stats() const {
  EngineStats s = stats_;
  s.num_waiting = scheduler_->num_waiting();
  s.num_running = scheduler_->num_running();
  s.kv_cache_usage = blocks_->usage();
  s.prefix_cache_queries = blocks_->prefix_queries();
  s.prefix_cache_hits = blocks_->prefix_hits();
  return s;
}

}  // namespace halo::engine
