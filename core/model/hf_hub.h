#pragma once
// A model argument -> a local model directory: a directory as is, or a
// Hugging Face Hub id ("meta-llama/Llama-2-7b-chat-hf") found in, or
// downloaded into, the Hugging Face cache.
//
//   auto dir = halo::model::resolve_model(args.model, {.revision = args.revision});
//   auto model = halo::model::LoadedModel::load(dir);
//
// The cache is laid out exactly as the Python huggingface_hub library lays
// it out, so each finds the other's downloads:
//   <cache>/models--ORG--NAME/refs/<revision>        the commit sha
//   <cache>/models--ORG--NAME/snapshots/<sha>/<file> -> ../../blobs/<etag>
//   <cache>/models--ORG--NAME/blobs/<etag>[.incomplete]
//   <cache>/.locks/models--ORG--NAME/<etag>.lock     (flock, shared with Python)
// A revision already in the cache is used without contacting the Hub (no
// check for a newer commit of a branch); pass a commit sha to pin one.
//
// Only what halo reads is downloaded: config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// chat_template.json / chat_template.jinja, and the weights halo loads
// (model.safetensors, or model.safetensors.index.json and the shards it
// names). A repo with no such safetensors is an error. For a PEFT LoRA
// adapter (resolve_adapter) only adapter_config.json and
// adapter_model.safetensors; a repo with only adapter_model.bin (a pickle)
// is an error.
//
// Connection errors, 429 and 5xx are retried with backoff (0.5 s doubling
// to 8 s; HALO_HUB_RETRIES sets how many times, default 5), a file resuming
// from its partial download with an HTTP Range request. Proxies come from
// libcurl's defaults (http_proxy, https_proxy, no_proxy of the process).
//
// Threading: resolve_model and resolve_adapter may be called from any
// thread, concurrently; the libcurl global init runs once (std::call_once)
// on the first download.
// Concurrent downloads of one file (threads or processes, halo or Python)
// are serialized by a file lock on its blob. Progress goes to stderr (a bar
// on a terminal, else an info log line every few seconds).
#include <filesystem>
#include <map>
#include <string>

namespace halo::model {

struct HubOptions {
  std::string revision;             // "" = main; a branch, tag or full 40-hex commit sha
  std::filesystem::path cache_dir;  // "" = hub_cache_dir(env)
  // "" = HF_TOKEN (or HUGGING_FACE_HUB_TOKEN) env, else the file HF_TOKEN_PATH,
  // else $HF_HOME/token (~/.cache/huggingface/token). Sent only to the endpoint's host.
  std::string token;
  std::string endpoint;  // "" = HF_ENDPOINT env, else https://huggingface.co
  bool offline = false;  // also on when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is 1/true/yes/on
  bool progress = true;  // false: no bar, no periodic progress lines
  // Environment to read the variables above from; empty = the process
  // environment. When given, only this map is read (lets tests inject).
  std::map<std::string, std::string> env;
};

// An existing directory is returned unchanged. Otherwise a Hub id (see
// looks_like_hub_id) resolves to <cache>/models--ORG--NAME/snapshots/<sha>
// when that snapshot is usable (config.json and the weights it needs are
// there), else is downloaded into the cache (unless offline). Throws
// halo::Error saying what was tried: the path checked, the cache and
// snapshot looked for, the URL and HTTP status (401/403: gated or private,
// set HF_TOKEN; 404: no such repo, revision or file), or that offline mode
// (HF_HUB_OFFLINE) prevented a download.
std::filesystem::path resolve_model(const std::string& id_or_dir, const HubOptions& opts = {});

// A PEFT LoRA adapter: an existing directory is returned unchanged; a Hub id
// resolves through the same cache and download rules as resolve_model, a
// snapshot being usable when it has adapter_config.json and
// adapter_model.safetensors. Throws halo::Error naming what is missing.
std::filesystem::path resolve_adapter(const std::string& id_or_dir, const HubOptions& opts = {});

// True when downloads are off: opts.offline, or HF_HUB_OFFLINE /
// TRANSFORMERS_OFFLINE set in opts.env (or the process environment).
bool offline_mode(const HubOptions& opts);

// True for text shaped like a Hub repo id: "name" or "org/name" made of
// letters, digits, '-', '_', '.' (no "--", "..", no leading/trailing '-' or
// '.', each part at most 96 chars), and not an existing path. Text starting
// with '/', './', '../' or '~' is a path, never an id.
bool looks_like_hub_id(const std::string& s);

// The Hub cache directory the environment selects: HF_HUB_CACHE (or the
// older HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub.
// A leading "~/" is expanded with HOME. An empty map reads the process
// environment.
std::filesystem::path hub_cache_dir(const std::map<std::string, std::string>& env);

}  // namespace halo::model
