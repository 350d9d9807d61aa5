#include "serve/kv_event_publisher.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <msgpack.hpp>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/error.h"

namespace halo::serve {
namespace {

using engine::KvCacheEvent;

std::string seq_bytes(int64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(static_cast<uint64_t>(seq) >> (8 * (7 - i)));
  return out;
}

void pack_event(msgpack::packer<msgpack::sbuffer>& pk, const KvCacheEvent& ev) {
  auto pack_str = [&](const char* s) {
    pk.pack_str(static_cast<uint32_t>(std::strlen(s)));
    pk.pack_str_body(s, static_cast<uint32_t>(std::strlen(s)));
  };
  auto pack_hashes = [&] {
    pk.pack_array(static_cast<uint32_t>(ev.block_hashes.size()));
    for (uint64_t h : ev.block_hashes) pk.pack_uint64(h);
  };
  switch (ev.kind) {
    case KvCacheEvent::Kind::kBlockStored:
      pk.pack_array(8);
      pack_str("BlockStored");
      pack_hashes();
      if (ev.parent_block_hash)
        pk.pack_uint64(*ev.parent_block_hash);
      else
        pk.pack_nil();
      pk.pack_array(static_cast<uint32_t>(ev.token_ids.size()));
      for (int32_t t : ev.token_ids) pk.pack_int32(t);
      pk.pack_int32(ev.block_size);
      pk.pack_nil();  // lora_id
      pk.pack_nil();  // medium: nil is the device's own memory
      pk.pack_nil();  // lora_name
      break;
    case KvCacheEvent::Kind::kBlockRemoved:
      pk.pack_array(3);
      pack_str("BlockRemoved");
      pack_hashes();
      pk.pack_nil();  // medium
      break;
    case KvCacheEvent::Kind::kAllBlocksCleared:
      pk.pack_array(1);
      pack_str("AllBlocksCleared");
      break;
  }
}

// The msgpack payload of one batch: [ts, [event...], data_parallel_rank (0:
// one engine per process)].
std::string encode_batch(double ts, const std::vector<KvCacheEvent>& events) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const auto& ev : events) pack_event(pk, ev);
  pk.pack_int(0);
  return std::string(buf.data(), buf.size());
}

// A ZeroMQ call that failed, as an Error naming what was being done.
[[noreturn]] void zmq_fail(const std::string& what) {
  throw Error(fmt::format("--kv-events-config: {}: {}", what, zmq_strerror(zmq_errno())));
}

bool binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

}  // namespace

KvEventsConfig parse_kv_events_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("--kv-events-config is not JSON: {}", e.what()));
  }
  if (!j.is_object()) throw Error("--kv-events-config must be a JSON object");
  KvEventsConfig c;
  bool publisher_given = false;
  for (const auto& [key, v] : j.items()) {
    auto need = [&](bool ok, const char* type) {
      if (!ok) throw Error(fmt::format("--kv-events-config: '{}' must be {}", key, type));
    };
    auto positive = [&] {
      need(v.is_number_integer() && v.get<int64_t>() > 0, "a positive integer");
      return v.get<int64_t>();
    };
    if (key == "enable_kv_cache_events")
      need(v.is_boolean(), "true or false"), c.enable_kv_cache_events = v.get<bool>();
    else if (key == "publisher") {
      need(v.is_string() && (v == "zmq" || v == "null"), "\"zmq\" or \"null\"");
      c.publisher = v.get<std::string>();
      publisher_given = true;
    } else if (key == "endpoint")
      need(v.is_string() && !v.get<std::string>().empty(), "an address"), c.endpoint = v;
    else if (key == "replay_endpoint") {
      need(v.is_null() || v.is_string(), "an address or null");
      if (v.is_string()) c.replay_endpoint = v.get<std::string>();
    } else if (key == "buffer_steps")
      c.buffer_steps = positive();
    else if (key == "hwm")
      c.hwm = positive();
    else if (key == "max_queue_size")
      c.max_queue_size = positive();
    else if (key == "topic")
      need(v.is_string(), "a string"), c.topic = v;
    else
      throw Error(
          fmt::format("--kv-events-config: unknown field '{}' (known: enable_kv_cache_events, "
                      "publisher, endpoint, "
                      "replay_endpoint, buffer_steps, hwm, max_queue_size, topic)",
                      key));
  }
  // As vLLM: events enabled without a publisher named means zmq.
  if (!publisher_given) c.publisher = c.enable_kv_cache_events ? "zmq" : "null";
  return c;
}

std::optional<int64_t> parse_replay_request(const std::vector<std::string>& frames) {
  if (frames.size() != 3 || !frames[1].empty() || frames[2].size() != 8) return std::nullopt;
  uint64_t start = 0;
  for (unsigned char c : frames[2]) start = (start << 8) | c;
  return static_cast<int64_t>(start);
}

struct KvEventPublisher::Impl {
  KvEventsConfig config;
  void* ctx = nullptr;
  void* pub = nullptr;
  void* replay = nullptr;
  int wake_fd = -1;  // eventfd: publish() wakes the thread blocked in zmq_poll

  std::mutex mu;                                          // guards queue and stop
  std::deque<std::pair<std::string, std::string>> queue;  // (topic, payload)
  bool stop = false;
  uint64_t dropped = 0;

  int64_t next_seq = 0;                                // thread only
  std::deque<std::pair<int64_t, std::string>> buffer;  // thread only: (seq, payload) for replay
  std::thread thread;

  void open();
  void run();
  void send_queued();
  void serve_replay();
  void close();
};

void KvEventPublisher::Impl::open() {
  ctx = zmq_ctx_new();
  if (!ctx) zmq_fail("creating a ZeroMQ context");
  pub = zmq_socket(ctx, ZMQ_PUB);
  int hwm = static_cast<int>(std::min<int64_t>(config.hwm, INT32_MAX));
  zmq_setsockopt(pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
  int linger = 500;  // ms the last batches may take to leave at shutdown
  zmq_setsockopt(pub, ZMQ_LINGER, &linger, sizeof linger);
  const bool bind = binds(config.endpoint);
  if (bind ? zmq_bind(pub, config.endpoint.c_str()) : zmq_connect(pub, config.endpoint.c_str()))
    zmq_fail(fmt::format("{} endpoint '{}'", bind ? "binding" : "connecting to", config.endpoint));
  if (config.replay_endpoint) {
    replay = zmq_socket(ctx, ZMQ_ROUTER);
    zmq_setsockopt(replay, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(replay, config.replay_endpoint->c_str()))
      zmq_fail(fmt::format("binding replay_endpoint '{}'", *config.replay_endpoint));
  }
  wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) throw Error("--kv-events-config: eventfd failed");
}

void KvEventPublisher::Impl::close() {
  if (pub) zmq_close(pub);
  if (replay) zmq_close(replay);
  if (ctx) zmq_ctx_term(ctx);
  if (wake_fd >= 0) ::close(wake_fd);
}

void KvEventPublisher::Impl::send_queued() {
  std::deque<std::pair<std::string, std::string>> batch;
  {
    std::lock_guard lk(mu);
    batch.swap(queue);
  }
  for (auto& [topic, payload] : batch) {
    const int64_t seq = next_seq++;
    const std::string sb = seq_bytes(seq);
    // PUB never blocks: past the high-water mark ZeroMQ drops the message.
    zmq_send(pub, topic.data(), topic.size(), ZMQ_SNDMORE);
    zmq_send(pub, sb.data(), sb.size(), ZMQ_SNDMORE);
    zmq_send(pub, payload.data(), payload.size(), 0);
    buffer.emplace_back(seq, std::move(payload));
    if (static_cast<int64_t>(buffer.size()) > config.buffer_steps) buffer.pop_front();
  }
}

// One replay request: [identity, "", start seq]. A malformed one is dropped
// (logged); it never stops the publisher.
void KvEventPublisher::Impl::serve_replay() {
  std::vector<std::string> frames;
  while (true) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, replay, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      return;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    const bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more) break;
  }
  const auto start = parse_replay_request(frames);
  if (!start) {
    spdlog::warn(
        "KV events: a replay request of {} frames is not [identity, \"\", seq(8 bytes)]; ignored",
        frames.size());
    return;
  }
  auto send = [&](const std::string& a, const std::string& b) {
    zmq_send(replay, frames[0].data(), frames[0].size(), ZMQ_SNDMORE);
    zmq_send(replay, "", 0, ZMQ_SNDMORE);
    zmq_send(replay, a.data(), a.size(), ZMQ_SNDMORE);
    zmq_send(replay, b.data(), b.size(), 0);
  };
  for (const auto& [seq, payload] : buffer)
    if (seq >= *start) send(seq_bytes(seq), payload);
  send(seq_bytes(-1), "");
}

void KvEventPublisher::Impl::run() {
  while (true) {
    zmq_pollitem_t items[2] = {{nullptr, wake_fd, ZMQ_POLLIN, 0}, {replay, 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, replay ? 2 : 1, 1000);
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t n;
      [[maybe_unused]] auto r = ::read(wake_fd, &n, sizeof n);
    }
    send_queued();
    if (replay && (items[1].revents & ZMQ_POLLIN)) serve_replay();
    std::lock_guard lk(mu);
    if (stop && queue.empty()) return;
  }
}

KvEventPublisher::KvEventPublisher(const KvEventsConfig& config) : impl_(std::make_unique<Impl>()) {
  impl_->config = config;
  try {
    impl_->open();
  } catch (...) {
    impl_->close();
    throw;
  }
  impl_->thread = std::thread([this] { impl_->run(); });
  spdlog::info("KV cache events: publishing on {}{} (topic '{}')", config.endpoint,
               config.replay_endpoint ? ", replay on " + *config.replay_endpoint : std::string(),
               config.topic);
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(impl_->wake_fd, &one, sizeof one);
  impl_->thread.join();
  impl_->close();
}

std::string KvEventPublisher::topic_for(const std::string& model) const {
  std::string t = impl_->config.topic;
  for (size_t at = t.find("{model}"); at != std::string::npos;
       at = t.find("{model}", at + model.size()))
    t.replace(at, 7, model);
  return t;
}

void KvEventPublisher::publish(const std::string& topic, std::vector<engine::KvCacheEvent> events) {
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string payload = encode_batch(ts, events);
  {
    std::lock_guard lk(impl_->mu);
    if (static_cast<int64_t>(impl_->queue.size()) >= impl_->config.max_queue_size) {
      if (impl_->dropped++ % 1000 == 0)
        spdlog::warn("KV events: the send queue is full ({} batches); {} batches dropped so far",
                     impl_->queue.size(), impl_->dropped);
      return;
    }
    impl_->queue.emplace_back(topic, std::move(payload));
  }
  uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(impl_->wake_fd, &one, sizeof one);
}

}  // namespace halo::serve
