#include "device/plugin.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

namespace halo::device {
namespace fs = std::filesystem;

// dlopen'ed directly: the error is dlerror()'s text alone (boost::dll's
// exceptions appended a stale ": Bad file descriptor" to every message).
struct Plugin::Library {
  void* handle = nullptr;
  ~Library() {
    if (handle != nullptr) ::dlclose(handle);
  }
};

const char* status_name(halo_status_code code) { return halo_status_name(code); }

std::string kind_name(halo_device_kind kind) {
  switch (kind) {
    case HALO_DEVICE_KIND_CPU: return "cpu";
    case HALO_DEVICE_KIND_GPU: return "gpu";
    case HALO_DEVICE_KIND_NPU: return "npu";
    default: return "other";
  }
}

std::string capability_names(uint32_t caps) {
  static const std::pair<uint32_t, const char*> kNames[] = {
      {HALO_CAP_DTYPE_FP32, "fp32"},
      {HALO_CAP_DTYPE_BF16, "bf16"},
      {HALO_CAP_DTYPE_FP16, "fp16"},
      {HALO_CAP_CHUNKED_PREFILL, "chunked-prefill"},
      {HALO_CAP_MIXED_BATCH, "mixed-batch"},
      {HALO_CAP_STATIC_SHAPES, "static-shapes"},
      {HALO_CAP_BUFFERS, "buffers"},
      {HALO_CAP_TENSOR_PARALLEL, "tensor-parallel"},
      {HALO_CAP_HIDDEN_STATES, "hidden-states"},
      {HALO_CAP_LORA, "lora"}};
  std::string out;
  for (auto [bit, name] : kNames) {
    if (caps & bit) out.append(out.empty() ? "" : ",").append(name);
  }
  return out;
}

namespace {

fs::path resolve_plugin(const std::string& name_or_path) {
  bool is_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".so");
  if (is_path) {
    if (!fs::exists(name_or_path)) throw Error(fmt::format("plugin file {} does not exist", name_or_path));
    return fs::path(name_or_path);
  }
  std::string file = "libhalo_plugin_" + name_or_path + ".so";
  std::string searched;
  for (const auto& dir : plugin_search_path()) {
    std::error_code ec;
    if (fs::exists(dir / file, ec)) return fs::weakly_canonical(dir / file, ec);
    searched.append(searched.empty() ? "" : ", ").append(dir.lexically_normal().string());
  }
  std::string known;
  for (const auto& f : find_plugin_files()) known.append(known.empty() ? "" : ", ").append(f.name);
  // Every in-tree plugin is the CMake target halo_plugin_<name>; a quick
  // start that built only the cpu one needs to be told which to build.
  throw Error(fmt::format("no plugin for device '{}': {} not found in [{}] (set HALO_PLUGIN_PATH); "
                          "plugins found: {}. In a source build, build it with: cmake --build build --target "
                          "halo_plugin_{}",
                          name_or_path, file, searched, known.empty() ? "none" : known, name_or_path));
}

// ------------------------------------------------------------ ELF check
// dlopen maps a library's segments as the program headers describe them; for
// a truncated file those mappings reach past its end and the first access
// there is a SIGBUS that kills the whole process (`halo devices` included,
// though it only wanted to list the other plugins). So the headers are read
// and checked against the file size first: a few hundred bytes of reading.

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
constexpr uint16_t kHostMachine = EM_NONE;  // not checked
#endif

// Reads exactly `n` bytes at `offset`; false when the file is shorter.
bool read_at(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// True when [offset, offset + count * entsize) lies within `size` bytes.
bool table_fits(uint64_t offset, uint64_t count, uint64_t entsize, uint64_t size) {
  if (count != 0 && entsize > (size / count)) return false;
  return offset <= size && count * entsize <= size - offset;
}

// Why the ELF file at `fd` cannot be a loadable plugin; "" when it looks sound.
std::string elf_problem(int fd, uint64_t size) {
  Elf64_Ehdr eh{};
  if (!read_at(fd, &eh, sizeof eh, 0)) return fmt::format("{} bytes, shorter than an ELF header", size);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "no ELF magic";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return "not a 64-bit ELF file";
  if (eh.e_ident[EI_DATA] != (std::endian::native == std::endian::little ? ELFDATA2LSB : ELFDATA2MSB))
    return "ELF byte order differs from this machine's";
  if (eh.e_type != ET_DYN) return fmt::format("ELF type {} is not a shared object", eh.e_type);
  if (kHostMachine != EM_NONE && eh.e_machine != kHostMachine)
    return fmt::format("built for ELF machine {}, this machine is {}", eh.e_machine, kHostMachine);
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0) return "no valid program header table";
  if (!table_fits(eh.e_phoff, eh.e_phnum, eh.e_phentsize, size))
    return fmt::format("program header table ends past the end of the file ({} bytes)", size);
  if (eh.e_shoff != 0 && !table_fits(eh.e_shoff, eh.e_shnum, eh.e_shentsize, size))
    return fmt::format("section header table ends past the end of the file ({} bytes)", size);
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!read_at(fd, ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff)) return "cannot read the program headers";
  for (size_t i = 0; i < ph.size(); ++i) {
    const Elf64_Phdr& p = ph[i];
    if (p.p_type != PT_LOAD && p.p_type != PT_DYNAMIC) continue;
    if (!table_fits(p.p_offset, 1, p.p_filesz, size))
      return fmt::format("segment {} (file bytes {}..{}) ends past the end of the file ({} bytes)", i, p.p_offset,
                         p.p_offset + p.p_filesz, size);
  }
  return "";
}

// Refuses a file dlopen could not map safely, naming the reason.
void check_elf_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("plugin {}: cannot open: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0) problem = fmt::format("cannot stat: {}", std::strerror(errno));
  else if (!S_ISREG(st.st_mode)) problem = "not a regular file";
  else problem = elf_problem(fd, static_cast<uint64_t>(st.st_size));
  ::close(fd);
  if (!problem.empty())
    throw Error(fmt::format("plugin {}: truncated or not a valid shared library ({})", path.string(), problem));
}

// Oldest table size a v1 host can use: everything up to executable_destroy.
constexpr size_t kMinApiSize = HALO_STRUCT_SIZE(halo_plugin_api, execute);

}  // namespace

std::shared_ptr<Plugin> Plugin::load(const std::string& name_or_path) {
  fs::path path = resolve_plugin(name_or_path);
  auto plugin = std::shared_ptr<Plugin>(new Plugin());  // private constructor
  plugin->path_ = path;
  check_elf_file(path);
  plugin->library_ = std::make_unique<Library>();
  ::dlerror();  // clear a stale message
  // RTLD_NODELETE: a plugin and its libraries stay mapped after dlclose, so
  // that what they allocate once at load time (oneDNN, OpenCL's loader) is
  // still named at exit in LeakSanitizer's report, where the suppressions
  // match it by library; an unloaded module is only "<unknown module>".
  plugin->library_->handle = ::dlopen(path.c_str(), RTLD_LOCAL | RTLD_NOW | RTLD_NODELETE);
  if (plugin->library_->handle == nullptr) {
    const char* why = ::dlerror();
    throw Error(fmt::format("plugin {}: cannot load as a shared library: {}", path.string(),
                            why ? why : "dlopen failed"));
  }
  void* entry = ::dlsym(plugin->library_->handle, HALO_PLUGIN_ENTRY_SYMBOL);
  if (entry == nullptr) {
    throw Error(fmt::format("plugin {}: missing entry symbol {} (not a halo device plugin)",
                            path.string(), HALO_PLUGIN_ENTRY_SYMBOL));
  }
  using GetApi = const halo_plugin_api* (*)();
  const halo_plugin_api* api = reinterpret_cast<GetApi>(entry)();
  if (api == nullptr) throw Error(fmt::format("plugin {}: {} returned NULL", path.string(), HALO_PLUGIN_ENTRY_SYMBOL));
  if (api->abi_major != HALO_ABI_VERSION_MAJOR) {
    throw Error(fmt::format("plugin {}: ABI major version {} (v{}.{}) is not supported by this halo, which speaks v{}.{}",
                            path.string(), api->abi_major, api->abi_major, api->abi_minor,
                            HALO_ABI_VERSION_MAJOR, HALO_ABI_VERSION_MINOR));
  }
  if (api->struct_size < kMinApiSize) {
    throw Error(fmt::format("plugin {}: function table is {} bytes, smaller than the {} bytes of ABI v1.0",
                            path.string(), api->struct_size, kMinApiSize));
  }
  bool complete = api->error_code && api->error_message && api->error_destroy && api->device_count &&
                  api->device_get_properties && api->device_open && api->device_destroy &&
                  api->prepare && api->executable_destroy && api->kv_cache_create &&
                  api->kv_cache_copy_blocks && api->kv_cache_destroy && api->execute;
  if (!complete) {
    throw Error(fmt::format("plugin {}: a required entry of the function table is NULL", path.string()));
  }
  plugin->api_ = api;
  plugin->name_ = api->plugin_name ? api->plugin_name : path.stem().string();
  spdlog::debug("loaded plugin '{}' {} from {}", plugin->name_, plugin->version_string(), path.string());
  return plugin;
}

Plugin::~Plugin() = default;

std::string Plugin::version_string() const {
  return fmt::format("ABI v{}.{}, plugin {}", api_->abi_major, api_->abi_minor,
                     api_->plugin_version ? api_->plugin_version : "?");
}

bool Plugin::has_compile() const {
  return api_->struct_size >= HALO_STRUCT_SIZE(halo_plugin_api, compile) && api_->compile != nullptr;
}

bool Plugin::has_device_stats() const {
  return api_->struct_size >= HALO_STRUCT_SIZE(halo_plugin_api, device_get_stats) &&
         api_->device_get_stats != nullptr;
}

std::optional<DeviceStats> Plugin::device_stats(int index) const {
  if (!has_device_stats()) return std::nullopt;
  halo_device_stats st{};
  st.struct_size = sizeof(st);
  halo_device_get_stats_args args{};
  args.struct_size = sizeof(args);
  args.device_index = index;
  args.stats = &st;
  check(api_->device_get_stats(&args), "device_get_stats");
  DeviceStats out;
  out.steps = st.steps;
  out.tokens = st.tokens;
  out.device_seconds = st.device_seconds;
  out.compute_seconds = st.compute_seconds;
  out.memory_seconds = st.memory_seconds;
  out.link_seconds = st.link_seconds;
  const int n = std::clamp(st.num_chips, 0, HALO_MAX_CHIPS);
  out.chip_memory_used.assign(st.chip_memory_used, st.chip_memory_used + n);
  out.chip_memory_capacity.assign(st.chip_memory_capacity, st.chip_memory_capacity + n);
  return out;
}

void Plugin::check(halo_error* error, const char* what) const {
  if (error == nullptr) return;
  halo_status_code code = api_->error_code(error);
  const char* msg = api_->error_message(error);
  std::string message = fmt::format("{} ({} plugin, {}): {}", what, name_, status_name(code),
                                    msg ? msg : "(no message)");
  api_->error_destroy(error);
  throw DeviceError(code, message);
}

int Plugin::device_count() const {
  halo_device_count_args args{};
  args.struct_size = sizeof(args);
  check(api_->device_count(&args), "device_count");
  return args.count;
}

DeviceInfo Plugin::device_info(int index) const {
  halo_device_properties props{};
  props.struct_size = sizeof(props);
  halo_device_get_properties_args args{};
  args.struct_size = sizeof(args);
  args.device_index = index;
  args.properties = &props;
  check(api_->device_get_properties(&args), "device_get_properties");
  DeviceInfo info;
  info.index = index;
  info.kind = props.kind;
  info.name.assign(props.name, strnlen(props.name, sizeof(props.name)));
  info.vendor.assign(props.vendor, strnlen(props.vendor, sizeof(props.vendor)));
  info.memory_bytes = props.memory_bytes;
  info.memory_free_bytes = props.memory_free_bytes;
  info.num_chips = props.num_chips;
  info.capabilities = props.capabilities;
  info.max_batch_size = props.max_batch_size;
  info.required_block_size = props.required_block_size;
  info.max_model_len = props.max_model_len;
  // v1.3 facts. kv_cache_dtypes lies in the tail padding of the v1.2 struct,
  // so the plugin's minor version, not struct_size, says whether it answered.
  if (api_->abi_major == 1 && api_->abi_minor >= 3) {
    info.kv_cache_dtypes = props.kv_cache_dtypes;
    info.compute_dtypes = props.compute_dtypes;
  }
  if (api_->abi_major == 1 && api_->abi_minor >= 4 &&
      props.struct_size >= HALO_STRUCT_SIZE(halo_device_properties, quant_types))
    info.quant_types = props.quant_types;
  return info;
}

namespace {
std::vector<halo_option> to_c_options(const Options& options) {
  std::vector<halo_option> out;
  for (const auto& [k, v] : options) out.push_back({k.c_str(), v.c_str()});
  return out;
}
}  // namespace

Device::Device(std::shared_ptr<Plugin> plugin, int index, const Options& options)
    : plugin_(std::move(plugin)) {
  int count = plugin_->device_count();
  if (index < 0 || index >= count) {
    throw Error(fmt::format("device index {} out of range: plugin '{}' has {} device(s)", index,
                            plugin_->name(), count));
  }
  info_ = plugin_->device_info(index);
  auto opts = to_c_options(options);
  halo_device_open_args args{};
  args.struct_size = sizeof(args);
  args.device_index = index;
  args.options = opts.data();
  args.num_options = opts.size();
  plugin_->check(plugin_->api().device_open(&args), "device_open");
  handle_ = args.device;
}

Device::~Device() {
  if (handle_) plugin_->api().device_destroy(handle_);
}

bool Device::has_hidden_states() const {
  return plugin_->api().abi_minor >= 5 && (info_.capabilities & HALO_CAP_HIDDEN_STATES) != 0;
}

bool Device::has_lora() const {
  const halo_plugin_api& api = plugin_->api();
  return api.abi_minor >= 6 && (info_.capabilities & HALO_CAP_LORA) != 0 &&
         api.struct_size >= HALO_STRUCT_SIZE(halo_plugin_api, lora_slot_set) &&
         api.lora_slot_set != nullptr;
}

std::optional<MeasuredPeak> Device::measure_peak(int32_t compute_dtype, double budget_seconds) const {
  const halo_plugin_api& api = plugin_->api();
  if (api.abi_minor < 3 || api.struct_size < HALO_STRUCT_SIZE(halo_plugin_api, device_measure_peak) ||
      api.device_measure_peak == nullptr)
    return std::nullopt;
  halo_device_measure_peak_args args{};
  args.struct_size = sizeof(args);
  args.device = handle_;
  args.compute_dtype = compute_dtype;
  args.budget_seconds = budget_seconds;
  plugin_->check(api.device_measure_peak(&args), "device_measure_peak");
  args.method[sizeof(args.method) - 1] = '\0';  // a plugin's unterminated string stops here
  return MeasuredPeak{args.flops_per_s, args.method};
}

void check_quantized_supported(const Plugin& plugin, const DeviceInfo& info,
                               std::span<const halo_quantized_tensor> quantized) {
  std::map<int32_t, std::string> missing;  // type -> an example weight
  for (const halo_quantized_tensor& q : quantized)
    if (!(info.quant_types & HALO_DTYPE_BIT(q.type))) missing.emplace(q.type, q.name);
  if (missing.empty()) return;
  std::vector<std::string> have, accepted;
  for (const auto& [type, example] : missing)
    have.push_back(fmt::format("{} (e.g. {})", halo_quant_type_name(type), example));
  for (int32_t t : {HALO_QUANT_INT8, HALO_QUANT_UINT4})
    if (info.quant_types & HALO_DTYPE_BIT(t)) accepted.emplace_back(halo_quant_type_name(t));
  throw Error(fmt::format(
      "the model has quantized weights of type {}, which device '{}' ({}) cannot run; it accepts "
      "{}",
      fmt::join(have, ", "), plugin.name(), plugin.version_string(),
      accepted.empty() ? std::string("no quantized weights")
                       : fmt::format("{}", fmt::join(accepted, ", "))));
}

Executable::Executable(std::shared_ptr<Device> device, const halo_model_spec& spec,
                       const std::vector<halo_named_tensor>& weights, halo_limits& limits,
                       const Options& options, std::span<const halo_quantized_tensor> quantized)
    : device_(std::move(device)) {
  check_quantized_supported(device_->plugin(), device_->info(), quantized);
  // A compiled model directory only runs on the plugin it was compiled for.
  if (spec.struct_size >= HALO_STRUCT_SIZE(halo_model_spec, compiled_target) && spec.compiled_target != nullptr &&
      device_->plugin().name() != spec.compiled_target) {
    throw Error(fmt::format("{} is a model compiled for device '{}'; run it with --device {} (not '{}')",
                            spec.compiled_model_dir ? spec.compiled_model_dir : "the model", spec.compiled_target,
                            spec.compiled_target, device_->plugin().name()));
  }
  auto opts = to_c_options(options);
  limits.struct_size = sizeof(limits);
  halo_prepare_args args{};
  args.struct_size = sizeof(args);
  args.device = device_->handle();
  args.spec = &spec;
  args.weights = weights.data();
  args.num_weights = weights.size();
  args.limits = &limits;
  args.options = opts.data();
  args.num_options = opts.size();
  args.quantized_weights = quantized.data();
  args.num_quantized_weights = quantized.size();
  const int32_t spec_proposed = limits.num_speculative_tokens;
  if (!device_->has_lora()) limits.max_loras = limits.max_lora_rank = 0;  // nothing to propose
  device_->plugin().check(device_->plugin().api().prepare(&args), "prepare");
  handle_ = args.executable;
  // A plugin older than v1.5 never heard of verify steps: one that mixes
  // prefill and decode runs any query count, a fixed-shape one none.
  if (device_->plugin().api().abi_minor < 5)
    limits.num_speculative_tokens = (limits.capabilities & HALO_CAP_MIXED_BATCH) ? spec_proposed : 0;
  if (!device_->has_lora()) limits.max_loras = limits.max_lora_rank = 0;  // whatever it left there
  limits_ = limits;
}

void Executable::set_lora_slot(int32_t slot, const std::vector<halo_named_tensor>& weights) {
  if (!device_->has_lora())
    throw Error(fmt::format("plugin '{}' has no LoRA adapter slots (no HALO_CAP_LORA)",
                            device_->plugin().name()));
  halo_lora_slot_args args{};
  args.struct_size = sizeof(args);
  args.executable = handle_;
  args.slot = slot;
  args.weights = weights.data();
  args.num_weights = weights.size();
  device_->plugin().check(device_->plugin().api().lora_slot_set(&args), "lora_slot_set");
}

Executable::~Executable() {
  if (handle_) device_->plugin().api().executable_destroy(handle_);
}

KvCache::KvCache(std::shared_ptr<Executable> executable, int num_blocks, int block_size)
    : executable_(std::move(executable)), num_blocks_(num_blocks), block_size_(block_size) {
  halo_kv_cache_create_args args{};
  args.struct_size = sizeof(args);
  args.executable = executable_->handle();
  args.num_blocks = num_blocks;
  args.block_size = block_size;
  auto& plugin = executable_->device().plugin();
  plugin.check(plugin.api().kv_cache_create(&args), "kv_cache_create");
  handle_ = args.kv_cache;
}

KvCache::~KvCache() {
  if (handle_) executable_->device().plugin().api().kv_cache_destroy(handle_);
}

namespace {
// A host fp32 [rows, cols] output over `buf`, grown as needed; `shape` must
// outlive the tensor.
DLTensor host_rows(std::vector<float>& buf, int64_t (&shape)[2], int64_t rows, int64_t cols) {
  const auto need = static_cast<size_t>(rows * cols);
  if (buf.size() < need) buf.resize(need);
  shape[0] = rows;
  shape[1] = cols;
  DLTensor out{};
  out.data = buf.data();
  out.device = {kDLCPU, 0};
  out.ndim = 2;
  out.dtype = {kDLFloat, 32, 1};
  out.shape = shape;
  return out;
}
}  // namespace

void KvCache::execute(const StepInputs& in, int64_t vocab, std::vector<float>& logits,
                      HiddenStates* hidden) {
  const auto rows = static_cast<int64_t>(in.logits_indices.size());
  int64_t shape[2], hidden_shape[2];
  DLTensor out = host_rows(logits, shape, rows, vocab);
  DLTensor hidden_out{};
  if (hidden) {
    if (!executable_->device().has_hidden_states())
      throw Error(fmt::format("plugin '{}' cannot return hidden states (no HALO_CAP_HIDDEN_STATES)",
                              executable_->device().plugin().name()));
    hidden_out = host_rows(hidden->rows, hidden_shape, rows, hidden->size);
  }
  halo_execute_args args{};
  args.struct_size = sizeof(args);
  args.executable = executable_->handle();
  args.kv_cache = handle_;
  args.num_tokens = static_cast<int32_t>(in.token_ids.size());
  args.token_ids = in.token_ids.data();
  args.positions = in.positions.data();
  args.slot_mapping = in.slot_mapping.data();
  args.num_seqs = static_cast<int32_t>(in.query_start.size()) - 1;
  args.query_start = in.query_start.data();
  args.context_lens = in.context_lens.data();
  args.block_tables = in.block_tables.data();
  args.max_blocks_per_seq = in.max_blocks_per_seq;
  args.num_logits = static_cast<int32_t>(in.logits_indices.size());
  args.logits_indices = in.logits_indices.data();
  args.logits = &out;
  args.hidden_states = hidden ? &hidden_out : nullptr;
  // NULL unless a sequence runs an adapter: a plugin without LoRA then never sees the array.
  const bool lora =
      std::any_of(in.lora_slots.begin(), in.lora_slots.end(), [](int32_t s) { return s >= 0; });
  args.lora_slots = lora ? in.lora_slots.data() : nullptr;
  auto& plugin = executable_->device().plugin();
  plugin.check(plugin.api().execute(&args), "execute");
}

void KvCache::copy_blocks(const std::vector<int32_t>& src, const std::vector<int32_t>& dst) {
  if (src.size() != dst.size()) throw Error("copy_blocks: src and dst differ in length");
  if (src.empty()) return;
  halo_kv_cache_copy_blocks_args args{};
  args.struct_size = sizeof(args);
  args.kv_cache = handle_;
  args.src_blocks = src.data();
  args.dst_blocks = dst.data();
  args.num_pairs = static_cast<int32_t>(src.size());
  auto& plugin = executable_->device().plugin();
  plugin.check(plugin.api().kv_cache_copy_blocks(&args), "kv_cache_copy_blocks");
}

}  // namespace halo::device
