// `halo compile`: ahead-of-time compilation for a static-shape device (rbln):
// fixed batch size, maximum sequence length and tensor-parallel degree. The
// plugin writes the manifest, the pre-sharded weights and the programs; this
// command adds config.json, generation_config.json and the tokenizer files, so
// the output directory runs with `halo generate OUT_DIR --device rbln`.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common/error.h"
#include "device/plugin.h"
#include "model/quantize.h"
#include "model_source.h"

namespace halo::tools {
namespace fs = std::filesystem;
namespace {

struct CompileOptions {
  std::string model_dir;
  std::string device = "rbln";
  int device_index = 0;
  int batch_size = 1;
  int max_seq_len = 0;
  int tensor_parallel_size = 1;
  std::string dtype = "auto";
  std::string quantization = "none";
  int quantization_group_size = 0;
  std::string decode_buckets;
  int num_speculative_tokens = 0;  // verify programs for speculative decoding (0: none)
  std::string out_dir;
  std::string profile;
  bool dry_run = false;
  model::HubOptions hub;
};

std::string gib(uint64_t b) { return fmt::format("{:.3f} GiB", double(b) / double(1ull << 30)); }

// The plugin's JSON summary: shapes, memory per chip, each program's estimate.
void print_summary(const char* summary) {
  auto j = nlohmann::json::parse(summary, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  // A plugin that stores quantized weights says so in "quantization" (rbln: int8).
  const auto q = j.find("quantization");
  const std::string quant = q != j.end() && q->is_object()
                                ? fmt::format(" quantization={}", q->value("type", "?"))
                                : std::string();
  const int spec = j.value("num_speculative_tokens", 0);
  fmt::print(
      "{} for {} ({}): batch_size={} max_seq_len={} kv_block_size={} tensor_parallel_size={} "
      "dtype={}{} "
      "decode_buckets={}{}\n",
      j.value("compiler_version", "?"), j.value("device", "?"), j.value("device_profile", "?"),
      j.value("batch_size", 0), j.value("max_seq_len", 0), j.value("kv_block_size", 0),
      j.value("tensor_parallel_size", 0), j.value("dtype", "?"), quant, j["decode_buckets"].dump(),
      spec > 0 ? fmt::format(" num_speculative_tokens={}", spec) : std::string());
  for (const auto& c : j["memory_per_chip"])
    fmt::print("  chip {}: weights {} + KV {} + buffers {} = {} of {}\n", c["chip"].get<int>(),
               gib(c["weights_bytes"]), gib(c["kv_bytes"]), gib(c["buffers_bytes"]),
               gib(c["total_bytes"]), gib(c["capacity_bytes"]));
  std::vector<std::pair<std::string, int>>
      kinds;  // programs per kind, in order: prefill, decode, verify
  for (const auto& p : j["programs"]) {
    const std::string kind = p.value("kind", "?");
    if (kinds.empty() || kinds.back().first != kind) kinds.emplace_back(kind, 0);
    ++kinds.back().second;
  }
  std::string counts;
  for (const auto& [kind, n] : kinds)
    counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, kind);
  fmt::print("  programs: {} ({})\n", j["programs"].size(), counts);
  // The compiler estimates decode and verify at a context of min(1024, max_seq_len).
  const std::string decode_label =
      fmt::format("context {}", std::min(1024, j.value("max_seq_len", 1024)));
  for (const auto& p : j["programs"]) {
    const auto& e =
        p.contains("estimate_at_ctx_1024") ? p["estimate_at_ctx_1024"] : p["estimate_first_chunk"];
    const std::string ratio =
        p.contains("decode_ratio_at_ctx_1024")
            ? fmt::format(", {:.3f}x decode_b{}", p["decode_ratio_at_ctx_1024"].get<double>(),
                          p["batch"].get<int>())
            : std::string();
    fmt::print(
        "  program {:<12} batch {:>3} x {:>4} tokens: {:.3f} ms simulated "
        "({}: compute {:.3f} / memory {:.3f} / link {:.3f} ms{})\n",
        p["name"].get<std::string>(), p["batch"].get<int>(), p["tokens"].get<int>(),
        1e3 * e["total_s"].get<double>(),
        p.contains("estimate_at_ctx_1024") ? decode_label : "first chunk",
        1e3 * e["compute_s"].get<double>(), 1e3 * e["memory_s"].get<double>(),
        1e3 * e["link_s"].get<double>(), ratio);
  }
}

void run_compile(const CompileOptions& o) {
  const fs::path dir = model::resolve_model(o.model_dir, o.hub);
  auto model =
      model::LoadedModel::load(dir, model::LoadOptions{o.quantization, o.quantization_group_size});
  if (model.is_compiled())
    throw Error(fmt::format("{} is already a compiled model (for device '{}'); compile the Hugging Face model directory",
                            dir.string(), model.config().compiled_target()));
  if (!o.dry_run && o.out_dir.empty()) throw Error("halo compile needs -o OUT_DIR (or --dry-run)");
  if (!o.dry_run && fs::exists(o.out_dir) && fs::equivalent(o.out_dir, dir))
    throw Error("-o OUT_DIR must differ from the model directory");
  auto plugin = device::Plugin::load(o.device);
  if (!plugin->has_compile())
    throw Error(fmt::format("device '{}' does not compile ahead of time ({}); run the model directory directly",
                            plugin->name(), plugin->version_string()));
  device::check_quantized_supported(*plugin, plugin->device_info(o.device_index),
                                    model.quantized_weights());

  device::Options opts = {{"batch_size", std::to_string(o.batch_size)},
                          {"tensor_parallel_size", std::to_string(o.tensor_parallel_size)},
                          {"dtype", o.dtype},
                          {"dry_run", o.dry_run ? "1" : "0"}};
  if (o.max_seq_len > 0) opts.emplace_back("max_seq_len", std::to_string(o.max_seq_len));
  if (!o.decode_buckets.empty()) opts.emplace_back("decode_buckets", o.decode_buckets);
  if (o.num_speculative_tokens != 0)
    opts.emplace_back("num_speculative_tokens", std::to_string(o.num_speculative_tokens));
  if (!o.profile.empty()) opts.emplace_back("profile", o.profile);
  std::vector<halo_option> c_opts;
  for (const auto& [k, v] : opts) c_opts.push_back({k.c_str(), v.c_str()});
  std::vector<halo_named_tensor> weights(model.weights().begin(), model.weights().end());
  std::vector<char> summary(1 << 20, '\0');

  halo_compile_args args{};
  args.struct_size = sizeof(args);
  args.device_index = o.device_index;
  args.spec = &model.config().spec;
  args.weights = weights.data();
  args.num_weights = weights.size();
  args.options = c_opts.data();
  args.num_options = c_opts.size();
  args.out_dir = o.out_dir.c_str();
  args.quantized_weights = model.quantized_weights().data();
  args.num_quantized_weights = model.quantized_weights().size();
  args.summary = summary.data();
  args.summary_capacity = summary.size();
  try {
    plugin->check(plugin->api().compile(&args), "compile");
  } catch (...) {
    print_summary(summary.data());
    throw;
  }
  print_summary(summary.data());
  if (o.dry_run) return;
  // The core reads the spec and the tokenizer from the compiled directory.
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja",
                        "chat_template.json"}) {
    if (!fs::exists(dir / f)) continue;
    const fs::path to = fs::path(o.out_dir) / f;
    fs::copy_file(dir / f, to, fs::copy_options::overwrite_existing);
    fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  }
  fmt::print("compiled {} -> {}\n", dir.string(), o.out_dir);
}

}  // namespace

void add_compile_command(CLI::App& app) {
  auto o = std::make_shared<CompileOptions>();
  auto* cmd = app.add_subcommand("compile", "Compile a model ahead of time for a static-shape device (rbln)");
  cmd->add_option("model", o->model_dir, "Hugging Face model directory or id (org/name)")->required();
  add_hub_options(*cmd, o->hub);
  cmd->add_option("--device", o->device, "Device plugin that compiles (rbln)")->capture_default_str();
  cmd->add_option("--device-index", o->device_index, "Which device of the plugin")->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Compiled batch size (the engine's max_num_seqs)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-seq-len", o->max_seq_len,
                  "Most tokens per sequence (= max_model_len = KV block size; default: max_position_embeddings)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tensor-parallel-size", o->tensor_parallel_size, "Chips the model is split across (RSD)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "bf16 or fp16 (auto: the checkpoint's 16-bit type, else bf16)")
      ->check(CLI::IsMember({"auto", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--quantization,-q", o->quantization,
                  "Quantize the weights before compiling: none, int8 (per output channel) or int4 "
                  "(the device must "
                  "accept the type)")
      ->check(CLI::IsMember(model::quantization_method_names()))
      ->capture_default_str();
  cmd->add_option("--quantization-group-size", o->quantization_group_size,
                  "Inputs sharing one scale for int4 (0: 32)");
  cmd->add_option("--decode-buckets", o->decode_buckets,
                  "Batch sizes of the decode programs, e.g. 4,2,1 (default: halving from --batch-size)");
  cmd->add_option(
         "--num-speculative-tokens", o->num_speculative_tokens,
         "Proposed tokens per sequence the verify programs check, for speculative decoding "
         "(--speculative-config with num_speculative_tokens up to this; 0: no verify programs)")
      ->capture_default_str();
  cmd->add_option("-o,--output", o->out_dir, "Output directory of the compiled model");
  cmd->add_option("--profile", o->profile, "Device profile YAML (default: HALO_RBLN_PROFILE or configs/rbln-atom.yaml)");
  cmd->add_flag("--dry-run", o->dry_run, "Check memory and print the estimates without writing anything");
  cmd->callback([o] { run_compile(*o); });
}

}  // namespace halo::tools
