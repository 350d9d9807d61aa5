#pragma once
// The KServe v2 / Triton gRPC protocol (proto/grpc_service.proto, service
// inference.GRPCInferenceService) as a codec over the ServingCore, beside the
// HTTP frontends: the same models, admission, preprocessing pool, stream
// pump, API key (metadata `authorization: Bearer <key>`) and drain.
//
//   ServerLive, ServerReady, ServerMetadata, ModelReady, ModelMetadata,
//   ModelConfig (decoupled: true), ModelStatistics, RepositoryIndex;
//   ModelInfer: one answer; ModelStreamInfer: any number of requests on one
//   stream, a streamed request answered piece by piece (the last flagged by
//   the parameter triton_final_response), a failed one by `error_message`.
//
// Requests are Triton generate requests of either model style (the vLLM
// backend's or TensorRT-LLM's tensors; serve/triton_request.h), answered in
// the form the client sent (typed contents or raw). ApiError statuses map to
// gRPC codes (400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND, 429
// RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 500 INTERNAL). A call the client
// cancels, or a stream it leaves, aborts its generations (their KV blocks
// are freed).
//
// Threads: gRPC's callback threads run the handlers, which only decode the
// tensors; tokenizing runs on the core's pool and answers come from the
// stream pump. Lifetime: stop() before destroying the ServingCore.
#include <chrono>
#include <memory>
#include <string>

#include "serve/frontend_context.h"

namespace halo::grpc_frontend {

struct GrpcOptions {
  std::string host = "127.0.0.1";
  int port = 8001;  // 0: any free port
  std::string version = "0.0.0";
  int max_message_bytes = 64 << 20;
};

class GrpcServer {
 public:
  GrpcServer(const serve::FrontendContext& ctx, GrpcOptions options);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Binds and serves; halo::Error when the address cannot be bound.
  void start();
  int port() const;
  // No new calls; calls still open at `deadline` are cancelled.
  void stop(std::chrono::system_clock::time_point deadline);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace halo::grpc_frontend
