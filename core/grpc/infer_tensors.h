#pragma once
// The tensors of a gRPC ModelInferRequest, read as the JSON body that
// TritonRequest (serve/triton_request.h) reads from the HTTP generate
// extension, and the answer's output tensors written in the form the client
// used: typed `contents`, or `raw_output_contents` when it sent
// `raw_input_contents` (BYTES elements as a 4-byte little-endian length and
// the bytes; numbers little-endian).
//
// Pure functions and a plain value; any thread.
#include <cstdint>
#include <string>
#include <vector>

#include "grpc_service.pb.h"
#include "serve/api_common.h"

namespace halo::grpc_frontend {

struct InferInputs {
  serve::json body;  // {"text_input": ..., "stream": ..., "parameters": {...}, ...}
  bool raw = false;  // the data came as raw_input_contents
};

// ApiError (400) naming the tensor for a bad datatype, shape or data.
InferInputs read_inputs(const inference::ModelInferRequest& req);

// Output tensors appended to `resp`, typed or raw.
class OutputWriter {
 public:
  OutputWriter(inference::ModelInferResponse& resp, bool raw) : resp_(resp), raw_(raw) {}
  void bytes(const std::string& name, const std::vector<std::string>& values);
  void uint32(const std::string& name, uint32_t value);
  void fp32(const std::string& name, const std::vector<float>& values);

 private:
  inference::ModelInferResponse::InferOutputTensor& add(const std::string& name,
                                                        const char* datatype, size_t count);
  inference::ModelInferResponse& resp_;
  bool raw_;
};

// A request parameter's value as JSON.
serve::json parameter_json(const inference::InferParameter& p);

}  // namespace halo::grpc_frontend
