#include "model/hf_hub.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#ifdef HALO_HAVE_OPENSSL
#include <openssl/evp.h>
#endif

#include "common/error.h"

namespace halo::model {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kDefaultEndpoint = "https://huggingface.co";

// ---------------------------------------------------------------- environment

// The variables come from the injected map when it is non-empty, else from
// the process environment (getenv is safe here: halo never calls setenv).
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& m) : map_(m) {}
  std::string get(const std::string& name) const {
    if (!map_.empty()) {
      auto it = map_.find(name);
      return it == map_.end() ? std::string() : it->second;
    }
    const char* v = std::getenv(name.c_str());
    return v ? std::string(v) : std::string();
  }

 private:
  const std::map<std::string, std::string>& map_;
};

std::string trim(std::string s) {
  auto ws = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!s.empty() && ws(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && ws(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// huggingface_hub's _is_true: 1, ON, YES, TRUE (any case).
bool is_true(const std::string& v) {
  const std::string l = lower(trim(v));
  return l == "1" || l == "on" || l == "yes" || l == "true";
}

fs::path expand_home(const std::string& p, const Env& env) {
  if (p == "~" || p.rfind("~/", 0) == 0) return fs::path(env.get("HOME")) / p.substr(std::min<size_t>(2, p.size()));
  return fs::path(p);
}

// $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
fs::path hf_home(const Env& env) {
  if (auto v = env.get("HF_HOME"); !v.empty()) return expand_home(v, env);
  if (auto v = env.get("XDG_CACHE_HOME"); !v.empty()) return expand_home(v, env) / "huggingface";
  return fs::path(env.get("HOME")) / ".cache" / "huggingface";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string find_token(const Env& env) {
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
    if (auto v = trim(env.get(name)); !v.empty()) return v;
  fs::path file = env.get("HF_TOKEN_PATH").empty() ? hf_home(env) / "token" : expand_home(env.get("HF_TOKEN_PATH"), env);
  return trim(read_text(file));
}

bool is_commit_sha(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(static_cast<unsigned char>(c)); });
}

// Writes via a temporary name and rename, so readers never see half a file.
void write_atomic(const fs::path& p, const std::string& data) {
  fs::create_directories(p.parent_path());
  fs::path tmp = p.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << data;
    if (!out.flush()) throw Error(fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, p);
}

// ---------------------------------------------------------------- cache

struct Cache {
  fs::path root;      // <cache>
  fs::path repo_dir;  // <cache>/models--ORG--NAME
  std::string lock_dir_name;
};

Cache cache_for(const fs::path& root, const std::string& repo) {
  std::string folder = "models--";
  for (char c : repo) folder += (c == '/') ? std::string("--") : std::string(1, c);
  return {root, root / folder, folder};
}

// What a usable model snapshot lacks ("" when halo can load it).
std::string model_snapshot_missing(const fs::path& dir) {
  if (!fs::is_directory(dir)) return "no directory " + dir.string();
  if (!fs::exists(dir / "config.json")) return "no config.json in " + dir.string();
  if (fs::exists(dir / "model.safetensors")) return {};
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) return "no model.safetensors or model.safetensors.index.json in " + dir.string();
  try {
    json j = json::parse(read_text(index));
    for (const auto& [name, shard] : j.at("weight_map").items())
      if (!fs::exists(dir / shard.get<std::string>())) return "shard " + shard.get<std::string>() + " missing in " + dir.string();
  } catch (const json::exception& e) {
    return "unreadable " + index.string() + ": " + e.what();
  }
  return {};
}

constexpr const char* kAdapterPickle =
    "adapter_model.bin is a pickle, which halo does not read: save the adapter with "
    "safe_serialization=True";

// What a usable PEFT LoRA adapter snapshot lacks ("" when halo can load it).
std::string adapter_snapshot_missing(const fs::path& dir) {
  if (!fs::is_directory(dir)) return "no directory " + dir.string();
  if (!fs::exists(dir / "adapter_config.json")) return "no adapter_config.json in " + dir.string();
  if (!fs::exists(dir / "adapter_model.safetensors"))
    return "no adapter_model.safetensors in " + dir.string() +
           (fs::exists(dir / "adapter_model.bin") ? std::string(" (") + kAdapterPickle + ")"
                                                  : std::string());
  return {};
}

struct CacheLookup {
  fs::path snapshot;  // empty when the revision is unknown to the cache
  std::string tried;  // for error messages
};

using SnapshotCheck = std::string (*)(const fs::path& snapshot);

CacheLookup lookup_cache(const Cache& cache, const std::string& rev,
                         SnapshotCheck snapshot_missing) {
  if (is_commit_sha(rev)) {
    fs::path snap = cache.repo_dir / "snapshots" / rev;
    std::string missing = snapshot_missing(snap);
    return {missing.empty() ? snap : fs::path(), "looked for " + snap.string() + ": " + missing};
  }
  const fs::path ref = cache.repo_dir / "refs" / rev;
  const std::string sha = trim(read_text(ref));
  if (sha.empty()) return {{}, "looked for " + ref.string() + ": not there"};
  fs::path snap = cache.repo_dir / "snapshots" / sha;
  std::string missing = snapshot_missing(snap);
  return {missing.empty() ? snap : fs::path(), ref.string() + " -> " + sha + ", " + (missing.empty() ? "ok" : missing)};
}

// An exclusive flock on <cache>/.locks/models--ORG--NAME/<etag>.lock, the
// file huggingface_hub's FileLock uses, so halo and Python never write one
// blob at once.
class BlobLock {
 public:
  explicit BlobLock(const fs::path& path) {
    fs::create_directories(path.parent_path());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(fmt::format("cannot open lock file {}: {}", path.string(), std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~BlobLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

// ---------------------------------------------------------------- sha256

class Sha256 {
 public:
#ifdef HALO_HAVE_OPENSSL
  static constexpr bool kAvailable = true;
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) { reset(); }
  void reset() { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void update(const char* p, size_t n) { EVP_DigestUpdate(ctx_.get(), p, n); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &len);
    std::string out;
    for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
#else
  static constexpr bool kAvailable = false;
  void reset() {}
  void update(const char*, size_t) {}
  std::string hex() { return {}; }
#endif
};

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// ---------------------------------------------------------------- progress

// A bar on a terminal; elsewhere an info line every 5 s (logs stay short).
class Progress {
 public:
  Progress(bool enabled, std::string name, uint64_t total)
      : enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1), name_(std::move(name)), total_(total) {}
  void start(uint64_t done) { done_ = start_done_ = done; }
  void add(size_t n) {
    done_ += n;
    if (!enabled_) return;
    auto now = Clock::now();
    if (now - last_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(5000))) return;
    last_ = now;
    print(false);
  }
  void finish() {
    if (enabled_) print(true);
  }

 private:
  using Clock = std::chrono::steady_clock;
  void print(bool final) {
    double secs = std::chrono::duration<double>(Clock::now() - t0_).count();
    double mbs = secs > 0 ? static_cast<double>(done_ - start_done_) / 1e6 / secs : 0.0;
    double pct = total_ ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 100.0;
    if (!tty_) {
      spdlog::info("hub: {} {:.1f}/{:.1f} MB ({:.0f}%) {:.1f} MB/s", name_, done_ / 1e6, total_ / 1e6, pct, mbs);
      return;
    }
    int filled = static_cast<int>(pct / 5);
    std::fprintf(stderr, "\r%-40.40s [%-20s] %8.1f/%.1f MB %7.1f MB/s%s", name_.c_str(),
                 std::string(static_cast<size_t>(std::clamp(filled, 0, 20)), '#').c_str(), done_ / 1e6, total_ / 1e6,
                 mbs, final ? "\n" : "");
    std::fflush(stderr);
  }
  bool enabled_, tty_;
  std::string name_;
  uint64_t total_, done_ = 0, start_done_ = 0;
  Clock::time_point t0_ = Clock::now(), last_{};
};

// ---------------------------------------------------------------- http

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl: curl_global_init failed");
  });
}

using CurlPtr = std::unique_ptr<CURL, decltype(&curl_easy_cleanup)>;
using SlistPtr = std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)>;
using CurlUrlPtr = std::unique_ptr<CURLU, decltype(&curl_url_cleanup)>;

struct Response {
  CURLcode rc = CURLE_OK;
  std::string curl_error;
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names, last response only
  std::string body;                           // non-2xx bodies and small 2xx bodies without a sink
  std::string location;                       // absolute redirect target, if any
  std::string url;                            // the URL this response came from
  bool token_sent = false;                    // an Authorization header went with it

  bool ok() const { return rc == CURLE_OK && status >= 200 && status < 300; }
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// Receives 2xx bodies; returning false aborts the transfer.
using Sink = std::function<bool(long status, const char* data, size_t n)>;

struct Transfer {
  Response* resp;
  const Sink* sink;
  CURL* curl;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* resp = static_cast<Response*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) resp->headers.clear();  // a new response (e.g. after 100 Continue)
  auto colon = line.find(':');
  if (colon != std::string::npos) resp->headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->sink && *t->sink && status >= 200 && status < 300) return (*t->sink)(status, data, size * n) ? size * n : 0;
  if (t->resp->body.size() < (64u << 20)) t->resp->body.append(data, size * n);
  return size * n;
}

// scheme://host:port of a URL, lower case ("" when it does not parse).
std::string origin(const std::string& url) {
  CurlUrlPtr u(curl_url(), &curl_url_cleanup);
  if (!u || curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) return {};
  std::string out;
  for (auto part : {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT}) {
    char* v = nullptr;
    curl_url_get(u.get(), part, &v, part == CURLUPART_PORT ? CURLU_DEFAULT_PORT : 0);
    out += lower(v ? v : "") + "|";
    curl_free(v);
  }
  return out;
}

std::string escape(const std::string& s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

// One request, no redirects followed (the caller decides where auth goes).
Response perform(const std::string& method, const std::string& url, const std::vector<std::string>& headers,
                 const Sink* sink) {
  curl_init_once();
  CurlPtr curl(curl_easy_init(), &curl_easy_cleanup);
  if (!curl) throw Error("libcurl: curl_easy_init failed");
  Response resp;
  resp.url = url;
  Transfer t{&resp, sink, curl.get()};
  SlistPtr list(nullptr, &curl_slist_free_all);
  for (const auto& h : headers) {
    curl_slist* next = curl_slist_append(list.get(), h.c_str());
    if (!next) throw Error("libcurl: out of memory");
    (void)list.release();
    list.reset(next);
  }
  char errbuf[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  if (method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(c, CURLOPT_USERAGENT, "halo; hf_hub/compatible");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: we run on arbitrary threads
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);  // a stalled transfer fails (and is retried)
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &resp);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  resp.rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  char* redirect = nullptr;
  if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &redirect) == CURLE_OK && redirect) resp.location = redirect;
  if (resp.rc != CURLE_OK) resp.curl_error = errbuf[0] ? errbuf : curl_easy_strerror(resp.rc);
  return resp;
}

bool retryable(const Response& r) {
  switch (r.rc) {
    case CURLE_OK:
      return r.status >= 500 || r.status == 429;
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------- hub client

struct FileMeta {
  std::string etag;    // without quotes; the sha256 for LFS files
  uint64_t size = 0;
  std::string commit;  // X-Repo-Commit
};

class Hub {
 public:
  Hub(std::string endpoint, std::string token, std::string repo, bool progress, int retries)
      : endpoint_(std::move(endpoint)), token_(std::move(token)), repo_(std::move(repo)), progress_(progress),
        retries_(retries) {
    while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
    endpoint_origin_ = origin(endpoint_);
  }

  std::string file_url(const std::string& rev, const std::string& file) const {
    return endpoint_ + "/" + repo_ + "/resolve/" + escape(rev, false) + "/" + escape(file, true);
  }

  json revision_info(const std::string& rev) const {
    const std::string url = endpoint_ + "/api/models/" + repo_ + "/revision/" + escape(rev, false);
    Response r = with_retries([&] { return request("GET", url, {}, nullptr, true); });
    if (!r.ok()) throw Error(describe(r));
    try {
      return json::parse(r.body);
    } catch (const json::exception& e) {
      throw Error(fmt::format("{}: not JSON: {}", url, e.what()));
    }
  }

  // HEAD without following redirects to another host: the LFS redirect's
  // own headers carry X-Linked-Etag / X-Linked-Size.
  FileMeta head(const std::string& url) const {
    Response r = with_retries([&] { return request("HEAD", url, {"Accept-Encoding: identity"}, nullptr, false); });
    if (!(r.ok() || (r.status >= 300 && r.status < 400 && r.rc == CURLE_OK))) throw Error(describe(r));
    FileMeta m;
    std::string etag = r.header("x-linked-etag").empty() ? r.header("etag") : r.header("x-linked-etag");
    if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
    etag.erase(std::remove(etag.begin(), etag.end(), '"'), etag.end());
    if (etag.empty()) throw Error(fmt::format("{}: HTTP {} without an ETag (not a Hugging Face Hub?)", url, r.status));
    m.etag = etag;
    std::string size = r.header("x-linked-size").empty() ? r.header("content-length") : r.header("x-linked-size");
    m.size = size.empty() ? 0 : std::stoull(size);
    m.commit = r.header("x-repo-commit");
    return m;
  }

  void download(const std::string& url, const std::string& name, const FileMeta& meta, const fs::path& blob) const;

 private:
  // Follows redirects itself so that the token goes to the endpoint's host
  // only (a pre-signed CDN URL must not get it). HEAD stops at a redirect to
  // another host, as huggingface_hub does.
  Response request(const std::string& method, std::string url, const std::vector<std::string>& extra, const Sink* sink,
                   bool follow_all) const {
    for (int hop = 0; hop < 10; ++hop) {
      std::vector<std::string> headers = extra;
      const bool same_host = origin(url) == endpoint_origin_;
      if (same_host && !token_.empty()) headers.push_back("Authorization: Bearer " + token_);
      Response r = perform(method, url, headers, sink);
      r.token_sent = same_host && !token_.empty();
      bool redirect = r.rc == CURLE_OK && r.status >= 300 && r.status < 400 && !r.location.empty();
      if (!redirect || (!follow_all && origin(r.location) != endpoint_origin_)) return r;
      url = r.location;
    }
    throw Error(fmt::format("{}: too many redirects", url));
  }

  template <typename Fn>
  Response with_retries(Fn&& attempt) const {
    const int kAttempts = retries_ + 1;
    auto delay = std::chrono::milliseconds(500);
    for (int i = 1;; ++i) {
      Response r = attempt();
      if (!retryable(r) || i == kAttempts) return r;
      spdlog::warn("hub: {} ({}); retry {}/{} in {} ms", r.url, r.rc ? r.curl_error : fmt::format("HTTP {}", r.status),
                   i, kAttempts - 1, delay.count());
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::milliseconds(8000));
    }
  }

  std::string describe(const Response& r) const {
    if (r.rc != CURLE_OK) return fmt::format("{}: {}", r.url, r.curl_error);
    std::string code = r.header("x-error-code"), msg = r.header("x-error-message");
    std::string detail = code.empty() ? "" : " (" + code + (msg.empty() ? "" : ": " + msg) + ")";
    if (r.status == 401 || r.status == 403) {
      return fmt::format(
          "{}: HTTP {}{}: the repo may be gated or private; {}", r.url, r.status, detail,
          r.token_sent ? "the token sent was refused (for a gated repo, accept its license on the Hub with this account)"
               : "set HF_TOKEN to an access token (or save one to ~/.cache/huggingface/token)");
    }
    if (r.status == 404) return fmt::format("{}: HTTP 404{}: no such repo, revision or file", r.url, detail);
    std::string body = r.body.substr(0, 200);
    return fmt::format("{}: HTTP {}{}{}", r.url, r.status, detail, body.empty() ? "" : ": " + body);
  }

  std::string endpoint_, endpoint_origin_, token_, repo_;
  bool progress_;
  int retries_;
};

// Appends to <blob>.incomplete from where it ends (HTTP Range), retrying
// with backoff; renames to <blob> once size (and sha256 for LFS) match.
void Hub::download(const std::string& url, const std::string& name, const FileMeta& meta, const fs::path& blob) const {
  const fs::path part = blob.string() + ".incomplete";
  const bool check_sha = Sha256::kAvailable && is_sha256_hex(meta.etag);
  Sha256 sha;
  Progress progress(progress_, name, meta.size);
  std::ofstream out;
  uint64_t written = 0;
  std::string write_error;
  bool first_chunk = true;
  Sink sink = [&](long status, const char* data, size_t n) {
    if (std::exchange(first_chunk, false) && status == 200 && written > 0) {  // Range ignored: start over
      out.close();
      out.open(part, std::ios::binary | std::ios::trunc);
      written = 0;
      sha.reset();
      progress.start(0);
    }
    out.write(data, static_cast<std::streamsize>(n));
    if (!out) write_error = fmt::format("cannot write {}: {}", part.string(), std::strerror(errno));
    written += n;
    sha.update(data, n);
    progress.add(n);
    return write_error.empty();
  };
  auto hash_part = [&] {
    sha.reset();
    if (!check_sha || written == 0) return;
    std::ifstream in(part, std::ios::binary);
    std::vector<char> buf(1 << 20);
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
      sha.update(buf.data(), static_cast<size_t>(in.gcount()));
  };
  auto attempt = [&] {
    // Resume from what is on disk (this or an earlier process's attempt).
    written = fs::exists(part) ? fs::file_size(part) : 0;
    if (meta.size && written > meta.size) fs::remove(part), written = 0;
    hash_part();
    out.close();
    out.clear();
    out.open(part, std::ios::binary | std::ios::app);
    progress.start(written);
    first_chunk = true;
    std::vector<std::string> headers = {"Accept-Encoding: identity"};
    if (written > 0) headers.push_back(fmt::format("Range: bytes={}-", written));
    Response r = request("GET", url, headers, &sink, true);
    out.close();
    return r;
  };
  written = fs::exists(part) ? fs::file_size(part) : 0;
  if (meta.size && written == meta.size) {
    hash_part();  // complete but not renamed (an earlier run stopped there)
  } else {
    if (written > 0) spdlog::info("hub: resuming {} from {} bytes", name, written);
    Response r = with_retries(attempt);
    if (r.rc == CURLE_OK && r.status == 416) {  // our partial file does not fit the blob: start over
      fs::remove(part);
      r = with_retries(attempt);
    }
    if (!write_error.empty()) throw Error(write_error);
    if (!r.ok()) throw Error(describe(r));
    progress.finish();
  }
  const uint64_t got = fs::file_size(part);
  if (meta.size && got != meta.size)
    throw Error(fmt::format("{}: got {} bytes, the Hub said {} ({} kept to resume)", url, got, meta.size, part.string()));
  if (check_sha) {
    if (std::string h = sha.hex(); h != meta.etag) {
      fs::remove(part);
      throw Error(fmt::format("{}: sha256 {} does not match the Hub's {}; removed the download", url, h, meta.etag));
    }
  }
  fs::rename(part, blob);
}

}  // namespace

namespace {

const std::set<std::string>& metadata_files() {
  static const std::set<std::string> names = {
      "config.json",          "generation_config.json", "tokenizer.json",          "tokenizer_config.json",
      "special_tokens_map.json", "chat_template.json",  "chat_template.jinja", "model.safetensors.index.json"};
  return names;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Weights halo cannot read, named in the "needs safetensors" error.
bool other_weight_format(const std::string& f) {
  for (const char* ext : {".bin", ".pt", ".pth", ".h5", ".msgpack", ".onnx", ".gguf", ".safetensors"})
    if (ends_with(f, ext)) return true;
  return false;
}

// Downloads into one repo's cache folder, at one commit.
class SnapshotFetcher {
 public:
  SnapshotFetcher(const Hub& hub, const Cache& cache, std::string sha)
      : hub_(hub), cache_(cache), sha_(std::move(sha)), dir_(cache.repo_dir / "snapshots" / sha_) {}

  const fs::path& dir() const { return dir_; }

  // <snapshot>/<file> -> ../../blobs/<etag>, the blob downloaded first when absent.
  void fetch(const std::string& file) {
    const fs::path pointer = dir_ / file;
    if (fs::exists(pointer)) return;  // a commit's files never change
    const std::string url = hub_.file_url(sha_, file);
    FileMeta meta = hub_.head(url);
    const fs::path blob = cache_.repo_dir / "blobs" / meta.etag;
    fs::create_directories(blob.parent_path());
    {
      BlobLock lock(cache_.root / ".locks" / cache_.lock_dir_name / (meta.etag + ".lock"));
      if (!fs::exists(blob)) hub_.download(url, file, meta, blob);
    }
    link(blob, pointer);
  }

 private:
  // Relative symlinks, as huggingface_hub makes them (the cache can move).
  static void link(const fs::path& blob, const fs::path& pointer) {
    fs::create_directories(pointer.parent_path());
    const fs::path tmp = pointer.string() + fmt::format(".tmp{}", ::getpid());
    std::error_code ec;
    fs::remove(tmp, ec);
    fs::create_symlink(fs::relative(blob, pointer.parent_path()), tmp);
    fs::rename(tmp, pointer);
  }

  const Hub& hub_;
  const Cache& cache_;
  std::string sha_;
  fs::path dir_;
};

// The shards model.safetensors.index.json names (unique, in order).
std::vector<std::string> index_shards(const fs::path& index) {
  std::vector<std::string> shards;
  try {
    for (const auto& [name, shard] : json::parse(read_text(index)).at("weight_map").items()) {
      auto s = shard.get<std::string>();
      if (std::find(shards.begin(), shards.end(), s) == shards.end()) shards.push_back(s);
    }
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: {}", index.string(), e.what()));
  }
  return shards;
}

// Top-level files of the revision, from the API's "siblings".
std::set<std::string> sibling_files(const json& info) {
  std::set<std::string> files;
  for (const auto& s : info.value("siblings", json::array()))
    if (auto f = s.value("rfilename", std::string()); !f.empty()) files.insert(f);
  return files;
}

void check_weights(const std::set<std::string>& files, const std::string& repo) {
  if (!files.count("config.json")) throw Error(fmt::format("{} has no config.json (not a transformers model?)", repo));
  if (files.count("model.safetensors") || files.count("model.safetensors.index.json")) return;
  std::string found;
  for (const auto& f : files)
    if (other_weight_format(f)) found += (found.empty() ? "" : ", ") + f;
  throw Error(fmt::format(
      "{} has no model.safetensors or model.safetensors.index.json: halo needs safetensors weights{}", repo,
      found.empty() ? std::string() : " (the repo has " + found + ")"));
}

// The index, when present, is what the loader reads: only its shards
// (repos such as Mistral's also carry a consolidated.safetensors).
std::vector<std::string> model_weights(const std::set<std::string>& files, const fs::path& snapshot,
                                       const std::string& where) {
  if (!files.count("model.safetensors.index.json")) return {"model.safetensors"};
  std::vector<std::string> shards = index_shards(snapshot / "model.safetensors.index.json");
  for (const auto& w : shards)
    if (!files.count(w))
      throw Error(fmt::format("{}: the index names {}, which the repo does not have", where, w));
  return shards;
}

bool is_gguf_file(const fs::path& p) { return p.extension() == ".gguf"; }

void check_adapter_files(const std::set<std::string>& files, const std::string& repo) {
  if (!files.count("adapter_config.json"))
    throw Error(fmt::format("{} has no adapter_config.json (not a PEFT adapter?)", repo));
  if (!files.count("adapter_model.safetensors"))
    throw Error(fmt::format(
        "{} has no adapter_model.safetensors: halo needs safetensors weights{}", repo,
        files.count("adapter_model.bin") ? std::string(" (") + kAdapterPickle + ")" : ""));
}

const std::set<std::string>& adapter_metadata_files() {
  static const std::set<std::string> names = {"adapter_config.json"};
  return names;
}

std::vector<std::string> adapter_weights(const std::set<std::string>&, const fs::path&,
                                         const std::string&) {
  return {"adapter_model.safetensors"};
}

// One kind of Hub repo (a model, a PEFT adapter): what its snapshot needs
// and which files to fetch. The cache lookup and the download are shared.
struct RepoKind {
  const char* noun;             // errors say "<noun> '<id>'"
  const char* not_an_id;        // the error's end for text neither a directory nor a Hub id
  const char* not_a_directory;  // ... and for an existing file not taken as is
  bool (*accept_file)(const fs::path& file);  // an existing file used as is (a .gguf model)
  SnapshotCheck snapshot_missing;
  // Throws unless the revision's files (the API's "siblings") have what is needed.
  void (*check_files)(const std::set<std::string>& files, const std::string& repo);
  const std::set<std::string>& (*metadata)();  // fetched first, those the repo has
  // The weights, once the metadata is in `snapshot`; `where` is repo@sha for errors.
  std::vector<std::string> (*weights)(const std::set<std::string>& files, const fs::path& snapshot,
                                      const std::string& where);
};

const RepoKind kModel = {"model",
                         "not a Hugging Face model id (org/name)",
                         "is a file, not a model directory or a .gguf file",
                         is_gguf_file,
                         model_snapshot_missing,
                         check_weights,
                         metadata_files,
                         model_weights};

const RepoKind kAdapter = {"adapter",
                           "not a Hugging Face Hub id (org/name)",
                           "is a file, not an adapter directory",
                           nullptr,
                           adapter_snapshot_missing,
                           check_adapter_files,
                           adapter_metadata_files,
                           adapter_weights};

fs::path download_snapshot(const Hub& hub, const Cache& cache, const std::string& repo,
                           const std::string& rev, const RepoKind& kind) {
  json info = hub.revision_info(rev);
  const std::string sha = info.value("sha", std::string());
  if (!is_commit_sha(sha)) throw Error(fmt::format("the Hub's revision info for {}@{} has no commit sha", repo, rev));
  const std::set<std::string> files = sibling_files(info);
  kind.check_files(files, repo);
  spdlog::info("hub: downloading {}@{} ({}) into {}", repo, rev, sha, cache.repo_dir.string());
  SnapshotFetcher fetcher(hub, cache, sha);
  for (const auto& f : kind.metadata())
    if (files.count(f)) fetcher.fetch(f);
  for (const auto& w : kind.weights(files, fetcher.dir(), repo + "@" + sha)) fetcher.fetch(w);
  if (std::string missing = kind.snapshot_missing(fetcher.dir()); !missing.empty())
    throw Error(fmt::format("downloaded {}@{} but the snapshot is not usable: {}", repo, sha, missing));
  if (rev != sha) write_atomic(cache.repo_dir / "refs" / rev, sha);  // last: the snapshot is complete
  return fetcher.dir();
}

// HALO_HUB_RETRIES: retries after a connection error or 5xx (default 5,
// backoff 0.5 s doubling to 8 s).
bool offline_env(const Env& env) {
  return is_true(env.get("HF_HUB_OFFLINE")) || is_true(env.get("TRANSFORMERS_OFFLINE"));
}

int retries_from(const Env& env) {
  const std::string v = trim(env.get("HALO_HUB_RETRIES"));
  if (v.empty()) return 5;
  try {
    return std::clamp(std::stoi(v), 0, 100);
  } catch (const std::exception&) {
    throw Error("HALO_HUB_RETRIES='" + v + "' is not a number");
  }
}

bool valid_id_part(const std::string& p) {
  static const std::regex re("[A-Za-z0-9_.-]{1,96}");
  if (!std::regex_match(p, re)) return false;
  if (p.front() == '-' || p.front() == '.' || p.back() == '-' || p.back() == '.') return false;
  return p.find("--") == std::string::npos && p.find("..") == std::string::npos;
}

}  // namespace

bool looks_like_hub_id(const std::string& s) {
  if (s.empty() || s[0] == '/' || s[0] == '~' || s.rfind("./", 0) == 0 || s.rfind("../", 0) == 0) return false;
  std::error_code ec;
  if (fs::exists(s, ec)) return false;
  const auto slash = s.find('/');
  if (slash == std::string::npos) return valid_id_part(s);
  if (s.find('/', slash + 1) != std::string::npos) return false;
  return valid_id_part(s.substr(0, slash)) && valid_id_part(s.substr(slash + 1)) && !ends_with(s, ".git");
}

fs::path hub_cache_dir(const std::map<std::string, std::string>& env_map) {
  Env env(env_map);
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"})
    if (auto v = env.get(name); !v.empty()) return expand_home(v, env);
  return hf_home(env) / "hub";
}

bool offline_mode(const HubOptions& opts) { return opts.offline || offline_env(Env(opts.env)); }

namespace {

fs::path resolve_repo(const std::string& id_or_dir, const HubOptions& opts, const RepoKind& kind) {
  std::error_code ec;
  if (fs::is_directory(id_or_dir, ec)) return fs::path(id_or_dir);
  if (kind.accept_file && fs::is_regular_file(id_or_dir, ec) && kind.accept_file(id_or_dir))
    return fs::path(id_or_dir);
  const std::string checked = fs::absolute(id_or_dir, ec).string();
  if (fs::exists(id_or_dir, ec))
    throw Error(fmt::format("{} '{}': {} {}", kind.noun, id_or_dir, checked, kind.not_a_directory));
  if (!looks_like_hub_id(id_or_dir))
    throw Error(fmt::format("{} '{}': no directory {} and {}", kind.noun, id_or_dir, checked,
                            kind.not_an_id));

  Env env(opts.env);
  const std::string rev = opts.revision.empty() ? "main" : opts.revision;
  const fs::path root = opts.cache_dir.empty() ? hub_cache_dir(opts.env) : opts.cache_dir;
  const Cache cache = cache_for(root, id_or_dir);
  CacheLookup found = lookup_cache(cache, rev, kind.snapshot_missing);
  if (!found.snapshot.empty()) {
    spdlog::debug("hub: {}@{} from the cache: {}", id_or_dir, rev, found.snapshot.string());
    return found.snapshot;
  }
  const std::string context =
      fmt::format("{} '{}' (revision {}): no directory {}; not in the Hugging Face cache {} ({})",
                  kind.noun, id_or_dir, rev, checked, root.string(), found.tried);
  const bool env_offline = offline_env(env);
  if (opts.offline || env_offline)
    throw Error(context + "; not downloading: offline mode" +
                (env_offline ? " (HF_HUB_OFFLINE is set)" : " (HF_HUB_OFFLINE / offline option)"));

  std::string endpoint = opts.endpoint.empty() ? env.get("HF_ENDPOINT") : opts.endpoint;
  Hub hub(endpoint.empty() ? kDefaultEndpoint : endpoint, opts.token.empty() ? find_token(env) : opts.token, id_or_dir,
          opts.progress, retries_from(env));
  try {
    return download_snapshot(hub, cache, id_or_dir, rev, kind);
  } catch (const Error& e) {
    throw Error(context + "; download failed: " + e.what());
  } catch (const fs::filesystem_error& e) {
    throw Error(context + "; download failed: " + e.what());
  }
}

}  // namespace

fs::path resolve_model(const std::string& id_or_dir, const HubOptions& opts) {
  return resolve_repo(id_or_dir, opts, kModel);
}

fs::path resolve_adapter(const std::string& id_or_dir, const HubOptions& opts) {
  return resolve_repo(id_or_dir, opts, kAdapter);
}

}  // namespace halo::model
