#pragma once
// KV cache events for prefix-aware routers (llm-d, the Gateway API Inference
// Extension's precise prefix scorer), in vLLM's wire format over ZeroMQ:
//
//   PUB:    multipart [topic, seq (8 bytes big-endian), payload]
//   ROUTER: a subscriber that missed batches sends [seq (8 bytes)] from a
//           DEALER/REQ socket and gets [seq, payload] for every buffered batch
//           from that one on, then [-1, ""] to end the replay.
//
// payload = msgpack [ts, [event...], data_parallel_rank], each event an array
// tagged by its name (msgspec's array_like tagged structs):
//   ["BlockStored", [hash...], parent|nil, [token id...], block_size, lora_id, medium, lora_name]
//   ["BlockRemoved", [hash...], medium]
//   ["AllBlocksCleared"]
// Hashes are engine/block_hash.h's chain. docs/kv-events.md has the details.
//
// Threads: publish() may be called from any thread (each model's engine
// thread); one thread of its own owns the sockets, encodes and sends.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/kv_events.h"

namespace halo::serve {

// vLLM's KVEventsConfig, the JSON of --kv-events-config.
struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  std::string publisher = "zmq";               // zmq | null
  std::string endpoint = "tcp://*:5557";       // a * or :: binds, else connects
  std::optional<std::string> replay_endpoint;  // ROUTER, always bound
  int64_t buffer_steps = 10000;                // batches kept for replay
  int64_t hwm = 100000;                        // the PUB socket's send high-water mark
  int64_t max_queue_size = 100000;  // batches waiting to be sent; more are dropped (logged)
  std::string topic;                // "{model}" becomes the served model's name
};

// Parses --kv-events-config; throws halo::Error naming the bad field.
KvEventsConfig parse_kv_events_config(const std::string& json);

// The start sequence of a replay request, from the frames the ROUTER socket
// receives: [identity, "", seq (8 bytes big-endian)]; none when malformed.
std::optional<int64_t> parse_replay_request(const std::vector<std::string>& frames);

class KvEventPublisher {
 public:
  // Opens the sockets (throws halo::Error naming an endpoint that cannot be
  // bound or connected) and starts the sending thread.
  explicit KvEventPublisher(const KvEventsConfig& config);
  // Sends what is queued (at most a second), then closes the sockets.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // The topic of a model's events: the configured topic with "{model}" replaced.
  std::string topic_for(const std::string& model) const;
  // Queues one batch; never blocks (a full queue drops it, with a warning).
  void publish(const std::string& topic, std::vector<engine::KvCacheEvent> events);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace halo::serve
